"""A test application whose workflow declares queries (docs/workflows.md, "Queries").

``queried_order`` prices an order (one activity), waits for an ``approve`` signal, then
completes. Its input carries a ``Sensitive`` card number, so the queries that read it show
what a query may see of a sealed value (nothing). Run with
``--app tests.integration.queries_app:app``; the unit tests fold its runs in memory.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator import (
    Context,
    KeelApp,
    Query,
    QueryContext,
    Sensitive,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)

APP = "tests.integration.queries_app:app"

app = KeelApp("keel-query-tests")


class Order(BaseModel):
    customer: str
    items: list[str]
    card: Sensitive[str]


class Line(BaseModel):
    index: int


@app.activity("price_order", input=Order)
def price_order(order: Order) -> dict[str, Any]:
    return {"total": 10 * len(order.items), "lines": len(order.items)}


def progress(ctx: QueryContext) -> dict[str, Any]:
    return {
        "state": ctx.state,
        "status": ctx.status,
        "priced": "price" in ctx.results,
        "approvals": len(ctx.signals.get("approve", [])),
    }


def line(ctx: QueryContext, args: Line) -> str:
    return ctx.input.items[args.index]  # type: ignore[attr-defined,no-any-return]


def card(ctx: QueryContext) -> Any:
    return ctx.input.card  # type: ignore[attr-defined]


def card_token(ctx: QueryContext) -> Any:
    return ctx.input.card.token  # type: ignore[attr-defined]


def tamper(ctx: QueryContext) -> None:
    ctx.results["price"]["total"] = 0


def _done(ctx: Context) -> dict[str, Any]:
    return {"total": ctx.results["price"]["total"], "approved_by": ctx.signals["approve"][-1]["by"]}


queried_order = app.workflow(
    WorkflowDefinition(
        "queried_order",
        1,
        Order,
        [
            State(
                "price", steps=[Step("price", "price_order")], transitions=[Transition("approval")]
            ),
            State("approval", wait=SignalWait("approve"), transitions=[Transition("done")]),
            State("done", complete=_done),
        ],
        queries=[
            Query("progress", progress),
            Query("line", line, args=Line),
            Query("card", card),
            Query("card_token", card_token),
            Query("input", lambda ctx: ctx.input_dict),
            Query("output", lambda ctx: ctx.output),
            Query("tamper", tamper),
            Query("broken", lambda ctx: ctx.results["missing"]),
        ],
    )
)
