"""A small order application the test kit's tests run: an approval that expires after 30
days, a charge with retries and a status query, a timer, a signal fed by a webhook, and an
LLM step. Written against the public face only, as a user's application is."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from orchestrator import (
    Context,
    HumanTask,
    KeelApp,
    OnExpiry,
    Query,
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WebhookSignal,
    WorkflowDefinition,
    activity,
    side_effect,
)
from orchestrator.llm import LlmCall, PromptTemplate

app = KeelApp("kit-tests")

#: The card processor's ledger: idempotency key -> charge (what a status query reads).
LEDGER: dict[str, dict[str, Any]] = {}


class Order(BaseModel):
    order_id: str
    amount: float


class Charge(BaseModel):
    charge_id: str
    amount: float


@app.activity("charge_card", input=Order, output=Charge)
@side_effect
def charge_card(order: Order) -> Charge:
    key = activity.context().idempotency_key
    charge = LEDGER.setdefault(key, {"charge_id": f"ch-{order.order_id}", "amount": order.amount})
    return Charge(**charge)


@app.activity("charge_status")
def charge_status(query: dict[str, Any]) -> dict[str, Any]:
    found = LEDGER.get(query["idempotency_key"])
    return {"found": True, "result": found} if found else {"found": False}


@app.activity("ship")
def ship(order: dict[str, Any]) -> dict[str, Any]:
    return {"tracking": f"tr-{order['order_id']}"}


def _operation(ctx: Context) -> dict[str, Any]:
    return {"resource": "orders.charge", "arguments": ctx.input_dict}


def _done(status: str) -> Any:
    def output(ctx: Context) -> dict[str, Any]:
        charge = ctx.results.get("charge")
        return {"status": status, "charge": charge["charge_id"] if charge else None}

    output.__qualname__ = f"done_{status}"
    return output


CHARGE = Step(
    "charge",
    "charge_card",
    retry=RetryPolicy(max_attempts=4, initial_interval_ms=60_000, max_interval_ms=600_000),
    status_query="charge_status",
)

order_approval = app.workflow(
    WorkflowDefinition(
        "order_approval",
        1,
        Order,
        [
            State(
                "approval",
                wait=HumanTask(
                    "approve_order",
                    role="order-approver",
                    owner="sales",
                    operation=_operation,
                    evidence=lambda ctx: ctx.input_dict,
                    due=timedelta(days=7),
                    expires=timedelta(days=30),
                    on_expiry=OnExpiry.REJECT,
                    on_approve="charge",
                    on_reject="rejected",
                ),
            ),
            State("charge", steps=[CHARGE], complete=_done("charged")),
            State("rejected", complete=_done("rejected")),
        ],
    )
)

charge_order = app.workflow(
    WorkflowDefinition(
        "charge_order", 1, Order, [State("charge", steps=[CHARGE], complete=_done("charged"))]
    )
)

ship_later = app.workflow(
    WorkflowDefinition(
        "ship_later",
        1,
        Order,
        [
            State("cool_off", wait=TimerWait(timedelta(days=14)), transitions=[Transition("ship")]),
            State("ship", steps=[Step("ship", "ship")], complete=lambda ctx: ctx.results["ship"]),
        ],
    )
)

await_delivery = app.workflow(
    WorkflowDefinition(
        "await_delivery",
        1,
        Order,
        [
            State(
                "in_transit",
                wait=SignalWait("delivered", timeout=timedelta(days=60), on_timeout="lost"),
                transitions=[Transition("done")],
            ),
            State("done", complete=lambda ctx: {"delivered": ctx.signals["delivered"][-1]}),
            State("lost", fail="the parcel was not delivered within 60 days"),
        ],
        queries=[Query("where", lambda q: {"state": q.state, "status": q.status})],
    )
)

app.webhook(
    "carrier",
    secret_env="KIT_TESTS_CARRIER_SECRETS",
    event_id=lambda body: body["event_id"],
    route=lambda body: WebhookSignal(body["order_id"], "delivered", {"at": body["at"]}),
)


class Triage(BaseModel):
    category: str
    confidence: float


TRIAGE = PromptTemplate("triage_order", 1, user="Triage this order: $order_id")
triage = LlmCall("triage_order", prompt=TRIAGE, output=Triage, model="m")

triage_order = app.workflow(
    WorkflowDefinition(
        "triage_order",
        1,
        Order,
        [
            State(
                "triage",
                steps=[app.llm_step("triage", triage)],
                complete=lambda c: c.results["triage"],
            )
        ],
    )
)
