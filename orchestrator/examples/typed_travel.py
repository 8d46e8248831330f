"""``travel_booking_typed``: the saga of ``travel.py`` written the typed way
(docs/workflows.md, "Typed steps"): steps name their activities by the handler functions,
inputs are models built by named functions of ``Context[TripInput]``, and the output
reads each result as the activity's output model, so ``mypy --strict`` checks every
field a definition reads (``make lint`` runs it on the examples).

It decides exactly as ``travel_booking`` v1 (``tests/unit/domain/authoring/test_typed_authoring.py``
replays that workflow's recorded runs against it), and is its own application so the
bundled one, and the runs recorded of it, stay as they are::

    keel workflow start travel_booking_typed --app orchestrator.examples.typed_travel:app \\
        --input '{"trip": "T1", "card": "4242424242424242", "amount": 420}' --wait
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator import KeelApp
from orchestrator.examples.travel import (
    CancelRequest,
    Charge,
    Reserve,
    TripInput,
    booking_status,
    booking_write,
    cancel_reservation,
    cancellation,
    charge_card,
    reserve_flight,
    reserve_hotel,
)
from orchestrator.workflow import Context, WorkflowDefinition

__all__ = ["Booked", "app", "travel_booking_typed"]

app = KeelApp("keel-typed-travel")
# The booking service's handlers, registered as they are in travel.py; the activity
# types and models default from each function's name and annotations.
for handler in (reserve_hotel, reserve_flight, charge_card, cancel_reservation, booking_status):
    app.activity(handler)


class Booked(BaseModel):
    hotel: str
    flight: str
    charge: str


def trip(ctx: Context[TripInput]) -> Reserve:
    return Reserve(trip=ctx.input.trip)


def charge(ctx: Context[TripInput]) -> Charge:
    return Charge(trip=ctx.input.trip, card=ctx.input.card, amount=ctx.input.amount)


def undo(reservation: dict[str, Any]) -> CancelRequest:
    """A compensation's input is computed from the step's recorded result (JSON)."""
    return CancelRequest(reservation_id=reservation["reservation_id"])


def booked(ctx: Context[TripInput]) -> Booked:
    return Booked(
        hotel=ctx.result(reserve_hotel).reservation_id,
        flight=ctx.result(reserve_flight).reservation_id,
        charge=ctx.result(charge_card)["charge_id"],
    )


travel_booking_typed = app.workflow(
    WorkflowDefinition.dag(
        "travel_booking_typed",
        1,
        TripInput,
        [
            booking_write("hotel", reserve_hotel, input=trip, compensation=cancellation(undo)),
            booking_write(
                "flight", reserve_flight, after="hotel", input=trip, compensation=cancellation(undo)
            ),
            booking_write("card", charge_card, after="flight", input=charge, irreversible=True),
        ],
        output=booked,
        output_model=Booked,
        description="travel_booking, typed: reserve a hotel and a flight, charge; undo on failure.",
    )
)
