"""A test application whose workflows declare search attributes (docs/run-search.md).

``shop_order`` ships an order (one activity) and completes, or, with ``hold``, waits for a
``release`` signal after shipping; ``shop_refund`` pays a refund back and completes. Both
declare ``customer`` (keyword), ``amount`` (number) and ``due`` (time) from the input, and
``shop_order`` its ``shipment`` (keyword) from the ship step's result, once it has one.
Run with ``--app tests.integration.search_app:app``.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from pydantic import BaseModel

from orchestrator import (
    KeelApp,
    QueryContext,
    SearchAttribute,
    SearchKind,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)

APP = "tests.integration.search_app:app"

app = KeelApp("keel-search-tests")


class Order(BaseModel):
    order_no: str
    customer: str
    amount: float
    due: date
    hold: bool = False


@app.activity("ship_order", input=Order)
def ship_order(order: Order) -> dict[str, Any]:
    return {"shipment": f"SHIP-{order.order_no}"}


@app.activity("pay_refund", input=Order)
def pay_refund(order: Order) -> dict[str, Any]:
    return {"refund": f"REF-{order.order_no}"}


def _shipment(ctx: QueryContext) -> str | None:
    return ctx.results["ship"]["shipment"] if "ship" in ctx.results else None


COMMON = (
    SearchAttribute("customer", SearchKind.KEYWORD, lambda ctx: ctx.input_dict["customer"]),
    SearchAttribute("amount", SearchKind.NUMBER, lambda ctx: ctx.input_dict["amount"]),
    SearchAttribute("due", SearchKind.TIME, lambda ctx: ctx.input.due),  # type: ignore[attr-defined]
)

shop_order = app.workflow(
    WorkflowDefinition(
        "shop_order",
        1,
        Order,
        [
            State(
                "ship",
                steps=[Step("ship", "ship_order", input=lambda ctx: ctx.input_dict)],
                transitions=[
                    Transition("held", when=lambda ctx: ctx.input_dict["hold"]),
                    Transition("done"),
                ],
            ),
            State("held", wait=SignalWait("release"), transitions=[Transition("done")]),
            State("done", complete=lambda ctx: ctx.results["ship"]),
        ],
        search_attributes=[
            *COMMON,
            SearchAttribute("shipment", SearchKind.KEYWORD, _shipment),
        ],
    )
)

shop_refund = app.workflow(
    WorkflowDefinition.dag(
        "shop_refund",
        1,
        Order,
        [Step("pay", "pay_refund", input=lambda ctx: ctx.input_dict)],
        output=lambda ctx: ctx.results["pay"],
        search_attributes=COMMON,
    )
)
