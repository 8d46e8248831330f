"""An example approval: a payment runs only after a qualified person approved exactly it.

* ``payment_approval`` v1: a human task asks the finance team (role
  ``finance-approver``) to approve paying ``amount`` to ``account``; it is due in a
  day, reminds the owner after 4 and 20 hours, escalates to the finance lead (who may
  also decide, role ``finance-lead``) after a day and expires after 3 days, which
  rejects. An approval is bound to the digest of the exact operation
  (``payments.pay`` with these arguments); approved -> ``record_payment`` runs and the
  run completes ``paid``; rejected or expired -> it completes ``rejected``.

Registers itself on the example application when imported (docs/human-tasks.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import Context, Escalation, HumanTask, OnExpiry, State, Step, WorkflowDefinition
from orchestrator.examples.registry import app

__all__ = ["payment_approval"]


class PaymentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    payment_id: str
    account: str
    amount: float = Field(gt=0)
    requested_by: str


class Payment(BaseModel):
    payment_id: str
    account: str
    amount: float


class PaymentRecord(BaseModel):
    payment_id: str
    recorded: bool


class ApprovalOutput(BaseModel):
    status: str  # "paid" | "rejected"
    payment_id: str
    decided_by: str | None


@app.activity("record_payment", input=Payment, output=PaymentRecord)
def record_payment(payment: Payment) -> PaymentRecord:
    """Stands for the real payment (pure here, so demos measure Keel)."""
    return PaymentRecord(payment_id=payment.payment_id, recorded=True)


def _payment(ctx: Context[PaymentRequest]) -> dict[str, Any]:
    i = ctx.input_dict
    return {"payment_id": i["payment_id"], "account": i["account"], "amount": i["amount"]}


def _operation(ctx: Context[PaymentRequest]) -> dict[str, Any]:
    return {"resource": "payments.pay", "arguments": _payment(ctx)}


def _evidence(ctx: Context[PaymentRequest]) -> dict[str, Any]:
    return {"payment": _payment(ctx), "requested_by": ctx.input_dict["requested_by"]}


def _outcome(status: str) -> Any:
    def output(ctx: Context[PaymentRequest]) -> dict[str, Any]:
        task = ctx.human_tasks.get("approve_payment", {})
        return {
            "status": status,
            "payment_id": ctx.input_dict["payment_id"],
            "decided_by": task.get("actor"),
        }

    output.__qualname__ = f"output_{status}"
    return output


payment_approval = app.workflow(
    WorkflowDefinition(
        "payment_approval",
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
                    due=timedelta(days=1),
                    reminders=[timedelta(hours=4), timedelta(hours=20)],
                    escalations=[
                        Escalation(timedelta(days=1), owner="finance-lead", role="finance-lead")
                    ],
                    expires=timedelta(days=3),
                    on_expiry=OnExpiry.REJECT,
                    on_approve="pay",
                    on_reject="rejected",
                ),
            ),
            State(
                "pay",
                steps=[Step("pay", record_payment, input=_payment)],
                complete=_outcome("paid"),
            ),
            State("rejected", complete=_outcome("rejected")),
        ],
        output_model=ApprovalOutput,
        description="Pay only what a qualified approver approved, within 3 days.",
    )
)
