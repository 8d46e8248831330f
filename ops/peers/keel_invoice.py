"""Keel's side of the invoice-lite workload: the same steps as remote activities
(``invoice_lite``, run by a worker process) and as local steps (``invoice_lite_local``,
run inside the orchestrator), the check in the workflow's output (the decider)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ops.peers import invoice_steps
from orchestrator import Context, KeelApp, Step, WorkflowDefinition

APP = "ops.peers.keel_invoice:app"
REMOTE = "invoice_lite"
LOCAL = "invoice_lite_local"

app = KeelApp("invoice-lite")


class Invoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice: str
    lines: list[int]


@app.activity("invoice_extract")
def extract(inp: dict[str, Any]) -> dict[str, Any]:
    return invoice_steps.extract(inp)


@app.activity("invoice_price")
def price(inp: dict[str, Any]) -> dict[str, Any]:
    return invoice_steps.price(inp)


@app.activity("invoice_post")
def post(inp: dict[str, Any]) -> dict[str, Any]:
    return invoice_steps.post(inp)


def _extract_input(ctx: Context[Invoice]) -> dict[str, Any]:
    return ctx.input.model_dump()


def _price_input(ctx: Context[Invoice]) -> Any:
    return ctx.results["extract"]


def _post_input(ctx: Context[Invoice]) -> Any:
    return ctx.results["price"]


def _checked(ctx: Context[Invoice]) -> dict[str, Any]:
    return invoice_steps.check(ctx.input.lines, ctx.results["post"])


def _definition(name: str, local: bool) -> WorkflowDefinition:
    return WorkflowDefinition.dag(
        name,
        1,
        Invoice,
        [
            Step("extract", "invoice_extract", input=_extract_input, local=local),
            Step("price", "invoice_price", after=["extract"], input=_price_input, local=local),
            Step("post", "invoice_post", after=["price"], input=_post_input, local=local),
        ],
        output=_checked,
        description="invoice-lite: three activities and a deterministic check.",
    )


app.workflow(_definition(REMOTE, local=False))
app.workflow(_definition(LOCAL, local=True))
