"""A fan-out example (docs/fan-out.md): post a batch of invoices, at most 5 at a time.

``invoice_batch`` v1 maps ``post_to_ledger`` (a real side effect with a status query,
``orchestrator/examples/invoices.py``) over the batch's invoices: each invoice is its
own logical activity with its own idempotency key, so a crash or a lost response never
posts one twice, and at most ``max_concurrency`` postings are in flight. An invoice the
ledger refuses for good is collected (``null`` in the results) instead of failing the
batch; the output lists the posting of every invoice in input order and the indexes
of those that failed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    Context,
    ItemFailurePolicy,
    RetryPolicy,
    SearchAttribute,
    SearchKind,
    State,
    Step,
    WorkflowDefinition,
)
from orchestrator.examples.invoices import Invoice
from orchestrator.examples.registry import app

#: Postings in flight at once for one batch.
BATCH_CONCURRENCY = 5


class InvoiceBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    batch_id: str
    invoices: list[Invoice] = Field(max_length=1000)


class BatchResult(BaseModel):
    postings: list[str | None]
    failed: list[int]


def _invoices(ctx: Context[InvoiceBatch]) -> list[dict[str, Any]]:
    return [invoice.model_dump() for invoice in ctx.input.invoices]


def _result(ctx: Context[InvoiceBatch]) -> dict[str, Any]:
    postings = [None if p is None else p["posting_id"] for p in ctx.results["post"]]
    return {"postings": postings, "failed": sorted(ctx.item_failures.get("post", {}))}


invoice_batch = app.workflow(
    WorkflowDefinition(
        "invoice_batch",
        1,
        InvoiceBatch,
        [
            State(
                "post",
                steps=[
                    Step(
                        "post",
                        "post_to_ledger",
                        for_each=_invoices,
                        max_concurrency=BATCH_CONCURRENCY,
                        on_item_failure=ItemFailurePolicy.COLLECT,
                        retry=RetryPolicy(
                            max_attempts=6,
                            initial_interval_ms=200,
                            backoff_coefficient=2.0,
                            max_interval_ms=2000,
                        ),
                        start_to_close=timedelta(seconds=5),
                        status_query="ledger_posting_status",
                        on_exhausted="fail",
                    )
                ],
                complete=_result,
            )
        ],
        output_model=BatchResult,
        description="Post a batch of invoices to the ledger, 5 at a time, each exactly once.",
        search_attributes=[
            SearchAttribute("batch_id", SearchKind.KEYWORD, lambda ctx: ctx.input_dict["batch_id"]),
            SearchAttribute(
                "invoice_count", SearchKind.NUMBER, lambda ctx: len(ctx.input_dict["invoices"])
            ),
            SearchAttribute(
                "total_amount",
                SearchKind.NUMBER,
                lambda ctx: sum(i["amount"] for i in ctx.input_dict["invoices"]),
            ),
        ],
    )
)
