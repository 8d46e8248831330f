"""A payment approval on a fast clock, for tests/integration/test_human_tasks.py.

``payment_approval`` of orchestrator/examples/approvals.py measures its SLA in days; this
one in seconds (one "day" = 2 s), so the whole life of a task — two reminders, the
escalation, the expiry — runs on the real durable timers without a real wait of days:
reminders after 0.33 and 1.67 "days" (4 h and 20 h), due and escalated to the finance
lead after 1 "day", expiring after ``expires_days`` (the example's 3 by default), which
rejects.

``payment_priced`` computes its operation from a price service that a test takes down and
brings back (the file ``TASKS_APP_PRICES_DOWN`` names exists while it is down).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    Context,
    Escalation,
    HumanTask,
    KeelApp,
    OnExpiry,
    State,
    Step,
    WorkflowDefinition,
)

DAY_S = 2.0
app = KeelApp("tasks-test")


class PaymentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    payment_id: str
    account: str
    amount: float = Field(gt=0)
    expires_days: float = 3.0


class Payment(BaseModel):
    payment_id: str
    account: str
    amount: float


class Paid(BaseModel):
    payment_id: str
    recorded: bool


@app.activity("pay_out", input=Payment, output=Paid)
def pay_out(payment: Payment) -> Paid:
    return Paid(payment_id=payment.payment_id, recorded=True)


def _payment(ctx: Context) -> dict[str, Any]:
    i = ctx.input_dict
    return {"payment_id": i["payment_id"], "account": i["account"], "amount": i["amount"]}


def _operation(ctx: Context) -> dict[str, Any]:
    return {"resource": "payments.pay", "arguments": _payment(ctx)}


def _evidence(ctx: Context) -> dict[str, Any]:
    return {"payment": _payment(ctx), "note": "invoice 7 of supplier ACME"}


def _expires(ctx: Context) -> float:
    return float(ctx.input_dict.get("expires_days", 3.0)) * DAY_S


def _done(status: str) -> Any:
    def output(ctx: Context) -> dict[str, Any]:
        task = ctx.human_tasks.get("approve_payment", {})
        return {"status": status, "decided_by": task.get("actor")}

    output.__qualname__ = f"done_{status}"
    return output


def _after_decision() -> list[State]:
    """The states an approval and a rejection lead to."""
    return [
        State("pay", steps=[Step("pay", "pay_out", input=_payment)], complete=_done("paid")),
        State("rejected", complete=_done("rejected")),
    ]


payment_fast = app.workflow(
    WorkflowDefinition(
        "payment_fast",
        1,
        PaymentRequest,
        [
            State(
                "approval",
                wait=HumanTask(
                    "approve_payment",
                    role="finance-approver",
                    owner="finance-team",
                    operation=_operation,
                    evidence=_evidence,
                    due=1 * DAY_S,
                    reminders=[DAY_S / 6, DAY_S * 5 / 6],
                    escalations=[Escalation(1 * DAY_S, owner="finance-lead", role="finance-lead")],
                    expires=_expires,
                    on_expiry=OnExpiry.REJECT,
                    on_approve="pay",
                    on_reject="rejected",
                ),
            ),
            *_after_decision(),
        ],
    )
)


def _priced_operation(ctx: Context) -> dict[str, Any]:
    down = os.environ.get("TASKS_APP_PRICES_DOWN")
    if down and Path(down).exists():
        raise ConnectionError("the price service is down")
    return _operation(ctx)


payment_priced = app.workflow(
    WorkflowDefinition(
        "payment_priced",
        1,
        PaymentRequest,
        [
            State(
                "approval",
                wait=HumanTask(
                    "approve_payment",
                    role="finance-approver",
                    operation=_priced_operation,
                    expires=_expires,
                    on_approve="pay",
                    on_reject="rejected",
                ),
            ),
            *_after_decision(),
        ],
    )
)
