"""A small workflow that waits, and the driver that answers it: what
tests/integration/test_evaluate_a_waiting_workflow.py evaluates with ``keel evaluate
--app tests.waiting_app:app --driver tests.waiting_app:driver``.

``order_approval``: stock is reserved, then a person approves the order (human task
``approve_order``, role ``order-approver``), then the payment provider's webhook
(``payments``, signed under the ``keel`` scheme) settles it, then the order ships and
waits for the carrier's ``delivered`` signal. An order above 500 is rejected.

``llm_driver`` plays the model (and the confirmation) for a bundled LLM example.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator import KeelApp
from orchestrator.client import Driver
from orchestrator.webhooks import WebhookSignal
from orchestrator.workflow import (
    Context,
    HumanTask,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)

__all__ = ["app", "driver", "llm_driver"]

app = KeelApp("waiting orders")


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order: str
    total: int


class Done(BaseModel):
    done: bool


@app.activity("reserve_stock", input=Order, output=Done)
def reserve_stock(order: Order) -> Done:
    return Done(done=True)


@app.activity("ship_order", input=Order, output=Done)
def ship_order(order: Order) -> Done:
    return Done(done=True)


def _order(ctx: Context) -> dict[str, Any]:
    return ctx.input_dict


def _operation(ctx: Context) -> dict[str, Any]:
    return {"resource": "orders.accept", "arguments": ctx.input_dict}


def _delivered(ctx: Context) -> dict[str, Any]:
    return {"outcome": "delivered", "paid": ctx.signals["payment_settled"][-1]["amount"]}


def _rejected(ctx: Context) -> dict[str, Any]:
    return {"outcome": "rejected", "paid": 0}


app.workflow(
    WorkflowDefinition(
        "order_approval",
        1,
        Order,
        [
            State(
                "reserve",
                steps=[Step("reserve", "reserve_stock", input=_order)],
                transitions=[Transition("approval")],
            ),
            State(
                "approval",
                wait=HumanTask(
                    "approve_order",
                    role="order-approver",
                    operation=_operation,
                    expires=timedelta(days=3),
                    on_approve="payment",
                    on_reject="rejected",
                ),
            ),
            State("payment", wait=SignalWait("payment_settled"), transitions=[Transition("ship")]),
            State(
                "ship",
                steps=[Step("ship", "ship_order", input=_order)],
                wait=SignalWait("delivered"),
                complete=_delivered,
            ),
            State("rejected", complete=_rejected),
        ],
    )
)

app.webhook(
    "payments",
    secret_env="KEEL_WEBHOOK_PAYMENTS_SECRETS",
    event_id=lambda body: body["id"],
    route=lambda body: WebhookSignal(body["order_id"], "payment_settled", body["payment"]),
)

driver = Driver("orders")
driver.human_task(
    "approve_order", lambda ctx: "approve" if ctx.input_dict["total"] <= 500 else "reject"
)
driver.webhook(
    "payment_settled",
    source="payments",
    body=lambda ctx: {
        "id": f"pay-{ctx.workflow_id}",
        "order_id": ctx.workflow_id,
        "payment": {"amount": ctx.input_dict["total"]},
    },
)
driver.signal("delivered", {"carrier": "DHL"})

#: Plays the model and the confirmation for ``invoice_extraction_confirm`` of
#: ``orchestrator.examples.llm_invoices:app``: every extraction gets the same answer.
llm_driver = Driver("extractions")
llm_driver.llm(
    "Extract vendor",
    json={
        "vendor": "ACME",
        "invoice_number": "1",
        "total": 12.5,
        "currency": "EUR",
        "confidence": 0.95,
    },
)
llm_driver.signal("confirm", {"ok": True})
