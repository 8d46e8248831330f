"""A test application with a cross-workflow saga: an order's payment and shipment.

``payment`` charges an amount (over 100 is refused, permanently); ``shipment`` waits for
signal ``ship``. The ``orders`` saga associates both by ``order_id`` and, reacting to
events only, cancels the order's shipment when its payment fails (also a shipment that
starts after the payment already failed).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from orchestrator import (
    CancelWorkflow,
    Emit,
    KeelApp,
    PermanentError,
    Saga,
    SagaFact,
    SagaView,
    SignalWait,
    State,
    Step,
    WorkflowDefinition,
)

app = KeelApp("sagas-test")


class Order(BaseModel):
    order_id: str
    amount: float = 10.0


@app.activity("charge_payment", input=Order)
def charge_payment(order: Order) -> dict[str, Any]:
    if order.amount > 100:
        raise PermanentError(f"payment of {order.amount} refused")
    return {"charged": order.amount}


app.workflow(
    WorkflowDefinition.dag(
        "payment",
        1,
        Order,
        [Step("charge", "charge_payment", input=lambda ctx: dict(ctx.input_dict))],
        output=lambda ctx: ctx.results["charge"],
    )
)
app.workflow(
    WorkflowDefinition(
        "shipment",
        1,
        Order,
        [
            State(
                "await",
                wait=SignalWait("ship", timeout=timedelta(hours=1)),
                complete=lambda ctx: {},
            )
        ],
    )
)


def _react(view: SagaView, fact: SagaFact) -> list[Emit]:
    failed = fact.event_type == "WorkflowFailed" or view.has("payment", "WorkflowFailed")
    if not failed:
        return []
    if fact.workflow_name == "payment":
        targets = view.members.get("shipment", [])
    else:  # a shipment that started after its payment failed
        targets = [fact.workflow_id]
    reason = f"order {view.correlation}: payment failed"
    return [Emit(wf, CancelWorkflow(reason)) for wf in targets]


orders = app.saga(
    Saga(
        "orders",
        reacts_to={"payment": {"WorkflowFailed"}, "shipment": {"WorkflowStarted"}},
        correlate=lambda workflow_id, data: data.get("order_id"),
        react=_react,
    ),
)
