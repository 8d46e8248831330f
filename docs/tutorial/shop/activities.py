"""The shop's activities: each a typed function the workers run.

``@app.activity`` registers a function under its name, its input and output models read
from its annotations. ``@side_effect`` marks one that writes to the outside world: the
worker claims its idempotency key first, so a retry after a crash gets the recorded
result back instead of writing twice, and a call whose outcome is unknown is settled by
the step's status query, ``call_status``, never blindly repeated (docs/activities.md).
"""

from orchestrator import activity
from orchestrator.activity import PermanentError, side_effect
from shop import services
from shop.app import app
from shop.models import (
    Charge,
    Digest,
    DigestRequest,
    Found,
    Line,
    Lookup,
    Order,
    Payment,
    Priced,
    Refund,
    Released,
    Reservation,
    Shipment,
    Shipped,
)

#: Orders above this total need a manager's approval.
APPROVAL_CENTS = 100_000
CATALOGUE = {"tea": 450, "cup": 1200, "kettle": 8900, "samovar": 95000}


@app.activity
def price_order(order: Order) -> Priced:
    """Check every line against the catalogue: a wrong price is permanent, not retried."""
    for line in order.lines:
        if CATALOGUE.get(line.sku) != line.unit_cents:
            raise PermanentError(f"line {line.sku}: not sold at {line.unit_cents} cents")
    total = sum(line.quantity * line.unit_cents for line in order.lines)
    return Priced(total_cents=total, needs_approval=total > APPROVAL_CENTS)


@app.activity
@side_effect
def reserve_item(line: Line) -> Reservation:
    key = activity.context().idempotency_key
    made = services.call(
        "reserve",
        key,
        lambda: {
            "reservation_id": services.new_id("res"),
            "sku": line.sku,
            "quantity": line.quantity,
        },
    )
    return Reservation.model_validate(made)


@app.activity
@side_effect
def release_item(reservation: Reservation) -> Released:
    key = activity.context().idempotency_key
    services.call("release", key, lambda: {"reservation_id": reservation.reservation_id})
    return Released(reservation_id=reservation.reservation_id)


@app.activity
@side_effect
def charge_card(charge: Charge) -> Payment:
    """A payment intent whose metadata names the run: Stripe's webhooks carry it back."""
    ctx = activity.context()
    made = services.call(
        "charge",
        ctx.idempotency_key,
        lambda: {
            "payment_id": services.new_id("pi"),
            "amount_cents": charge.amount_cents,
            "metadata": {"workflow_id": ctx.workflow_id},
        },
    )
    return Payment.model_validate(made)


@app.activity
def call_status(query: Lookup) -> Found:
    """The status query of every write: did the call with this key happen? Keel asks it
    before it ever sends a call whose answer was lost again (docs/activities.md)."""
    made = services.lookup(query.idempotency_key)
    return Found(found=False) if made is None else Found(found=True, result=made)


@app.activity
@side_effect
def refund_payment(payment: Payment) -> Refund:
    key = activity.context().idempotency_key
    made = services.call("refund", key, lambda: {"refund_id": services.new_id("re")})
    return Refund.model_validate(made)


#: The courier takes at most this many parcels in one shipment.
MAX_PARCELS = 3


@app.activity
@side_effect
def book_courier(shipment: Shipment) -> Shipped:
    if shipment.parcels > MAX_PARCELS:
        raise PermanentError(f"no courier takes {shipment.parcels} parcels in one shipment")
    key = activity.context().idempotency_key
    made = services.call("courier", key, lambda: {"tracking": services.new_id("trk")})
    return Shipped.model_validate(made)


@app.activity
def count_charges(request: DigestRequest) -> Digest:
    return Digest(shop=request.shop, charges=services.count("charge"))
