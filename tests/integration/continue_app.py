"""A billing loop that continues as new once a month, for issue 29 item 1.

``monthly_billing`` v1 (``--app tests.integration.continue_app:app``) bills one month
per run. Each run asks an LLM node (``llm.monthly_bill``) for the month's bill, then
posts it to the fake ledger with the example ``@side_effect`` handler ``post_to_ledger``
(status query ``ledger_posting_status``, both from ``orchestrator/examples/invoices.py``,
at ``KEEL_LEDGER_URL``). A run for a month before ``LAST_MONTH`` continues as new with
the next month; the run for ``LAST_MONTH`` completes.

Started at month 1 the workflow continues as new exactly ``CONTINUES`` (3) times: four
runs (months 1, 2, 3 and 4), three ``WorkflowContinuedAsNew`` events and one
``WorkflowCompleted``. Each run's node and posting must get a logical attempt, hence an
idempotency key, of their own (``<wf>/llm.monthly_bill/<run>``,
``<wf>/post_to_ledger/<run>``): a key carried over from an earlier run would answer
month 2 with month 1's stored model response and month 1's ledger posting.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    Context,
    KeelApp,
    LlmCall,
    PromptTemplate,
    RetryPolicy,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    prompts,
)
from orchestrator.examples import app as examples_app

__all__ = ["APP", "CONTINUES", "LAST_MONTH", "app", "statement"]

APP = "tests.integration.continue_app:app"
#: The month whose run completes; a run for an earlier month continues as new.
LAST_MONTH = 4
#: How many times a workflow started at month 1 continues as new.
CONTINUES = LAST_MONTH - 1

app = KeelApp("keel-continue-as-new-tests")
for _activity in ("post_to_ledger", "ledger_posting_status"):
    app.handlers[_activity] = examples_app.handlers[_activity]


class Billing(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str
    month: int = Field(default=1, ge=1, le=LAST_MONTH)


class MonthlyBill(BaseModel):
    """What the model answers for one month."""

    schema_version: ClassVar[int] = 1
    model_config = ConfigDict(extra="forbid")
    amount: float = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


BILL_PROMPT = prompts.register(
    PromptTemplate(
        "monthly_bill",
        1,
        system="You compute the monthly bill of an account from its statement.",
        user="Bill this statement: $statement",
    )
)

bill = LlmCall(
    "monthly_bill",  # activity type llm.monthly_bill
    prompt=BILL_PROMPT,
    output=MonthlyBill,
    model="keel-test-model",
    parameters={"temperature": 0},
    max_repairs=0,
)

RETRY = RetryPolicy(
    max_attempts=5, initial_interval_ms=100, backoff_coefficient=2.0, max_interval_ms=1000
)


def statement(account: str, month: int) -> str:
    """The statement text of one month; the fake model's script matches on it."""
    return f"statement {account}:m{month}."


def _statement(ctx: Context) -> dict[str, Any]:
    return {"statement": statement(ctx.input.account, ctx.input.month)}


def _invoice(ctx: Context) -> dict[str, Any]:
    return {
        "invoice_id": f"{ctx.input.account}-m{ctx.input.month}",
        "account": ctx.input.account,
        "amount": ctx.results["bill"]["output"]["amount"],
    }


def _last_month(ctx: Context) -> bool:
    return bool(ctx.input.month >= LAST_MONTH)


def _next_month(ctx: Context) -> dict[str, Any]:
    return {"account": ctx.input.account, "month": ctx.input.month + 1}


def _closed(ctx: Context) -> dict[str, Any]:
    return {"month": ctx.input.month, "posting_id": ctx.results["post"]["posting_id"]}


monthly_billing = app.workflow(
    WorkflowDefinition(
        "monthly_billing",
        1,
        Billing,
        [
            State(
                "bill",
                steps=[
                    app.llm_step("bill", bill, input=_statement, retry=RETRY),
                    Step(
                        "post",
                        "post_to_ledger",
                        after=["bill"],
                        input=_invoice,
                        retry=RETRY,
                        start_to_close=timedelta(seconds=5),
                        status_query="ledger_posting_status",
                    ),
                ],
                transitions=[Transition("closed", when=_last_month)],
                continue_as_new=_next_month,
            ),
            State("closed", complete=_closed),
        ],
        description=(
            "Bill a month with an LLM node, post it to the ledger, continue as new with the "
            "next month until LAST_MONTH."
        ),
    )
)
