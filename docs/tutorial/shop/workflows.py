"""The shop's workflows: an order from its price to its parcel, the shipping of it, and a
nightly digest. Each guard, input and output is a named function of ``Context[<input
model>]`` that reads results typed by their activity (docs/workflows.md, "Typed steps")."""

from datetime import timedelta
from typing import Any

from orchestrator.workflow import (
    Compensation,
    Context,
    HumanTask,
    OnExpiry,
    RetryPolicy,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)
from shop.activities import (
    book_courier,
    call_status,
    charge_card,
    count_charges,
    price_order,
    refund_payment,
    release_item,
    reserve_item,
)
from shop.app import app
from shop.models import (
    Charge,
    Confirmation,
    Digest,
    DigestRequest,
    Line,
    Order,
    Shipment,
    Shipped,
)

#: A write outlasts a provider's short outage: 6 attempts, 1 s apart and doubling, at most 30 s.
WRITE_RETRY = RetryPolicy(max_attempts=6, initial_interval_ms=1000, max_interval_ms=30_000)

# ---------------------------------------------------------------- shipping (a child)


def parcel(ctx: Context[Shipment]) -> Shipped:
    return ctx.result(book_courier)


shipping = app.workflow(
    WorkflowDefinition(
        "shipping",
        1,
        Shipment,
        [
            State(
                "book",
                steps=[Step("book", book_courier, retry=WRITE_RETRY, status_query=call_status)],
                complete=parcel,
            )
        ],
        output_model=Shipped,
    )
)

# ---------------------------------------------------------------- the order


def needs_approval(ctx: Context[Order]) -> bool:
    return ctx.result(price_order).needs_approval


def approval(ctx: Context[Order]) -> dict[str, Any]:
    """What a manager approves: this customer paying this total, and nothing else."""
    total = ctx.result(price_order).total_cents
    arguments = {"order": ctx.input.order_id, "customer": ctx.input.customer, "cents": total}
    return {"resource": "orders.accept", "arguments": arguments}


def lines(ctx: Context[Order]) -> list[Line]:
    return ctx.input.lines


def charge(ctx: Context[Order]) -> Charge:
    total = ctx.result(price_order).total_cents
    return Charge(order_id=ctx.input.order_id, card=ctx.input.card, amount_cents=total)


def shipment(ctx: Context[Order]) -> Shipment:
    return Shipment(order_id=ctx.input.order_id, parcels=len(ctx.input.lines))


def confirmation(ctx: Context[Order]) -> Confirmation:
    return Confirmation(
        order_id=ctx.input.order_id,
        payment_id=ctx.result(charge_card).payment_id,
        tracking=ctx.result(Shipped, step="ship").tracking,
        total_cents=ctx.result(price_order).total_cents,
    )


order_fulfilment = app.workflow(
    WorkflowDefinition(
        "order_fulfilment",
        1,
        Order,
        [
            State(
                "price",
                steps=[Step("price", price_order, on_exhausted="fail")],
                transitions=[Transition("approval", when=needs_approval), Transition("reserve")],
            ),
            State(
                "approval",
                wait=HumanTask(
                    "approve_order",
                    role="sales-manager",
                    owner="sales",
                    operation=approval,
                    due=timedelta(days=2),
                    expires=timedelta(days=30),
                    on_expiry=OnExpiry.REJECT,
                    on_approve="reserve",
                    on_reject="rejected",
                ),
            ),
            State(
                "reserve",
                steps=[
                    Step(
                        "reserve",
                        reserve_item,
                        for_each=lines,  # one reservation per line, 3 at a time
                        max_concurrency=3,
                        retry=WRITE_RETRY,
                        status_query=call_status,  # every write: asked before it is resent
                        compensation=Compensation(
                            release_item, retry=WRITE_RETRY, status_query=call_status
                        ),
                    ),
                    Step(
                        "charge",
                        charge_card,
                        after=["reserve"],
                        input=charge,
                        retry=WRITE_RETRY,
                        start_to_close=timedelta(seconds=30),
                        status_query=call_status,
                        compensation=Compensation(
                            refund_payment, retry=WRITE_RETRY, status_query=call_status
                        ),
                        on_exhausted="fail",
                    ),
                ],
                # Stripe confirms the payment by webhook (shop/webhooks.py)
                wait=SignalWait(
                    "payment_succeeded", timeout=timedelta(days=1), on_timeout="unpaid"
                ),
                transitions=[Transition("ship")],
            ),
            State(
                "ship",
                steps=[Step.child("ship", "shipping", input=shipment)],
                complete=confirmation,
            ),
            State("rejected", fail="the order was not approved"),
            State("unpaid", fail="Stripe did not confirm the payment within a day"),
        ],
        output_model=Confirmation,
        description="Price, approve above 1,000.00, reserve each line, charge, ship.",
    )
)

# ---------------------------------------------------------------- the nightly digest


def digest(ctx: Context[DigestRequest]) -> Digest:
    return ctx.result(count_charges)


nightly_digest = app.workflow(
    WorkflowDefinition.dag(
        "nightly_digest", 1, DigestRequest, [Step("count", count_charges)], output=digest
    )
)
