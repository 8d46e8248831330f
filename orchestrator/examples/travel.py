"""``travel_booking``: reserve a hotel, then a flight, then charge the card, against the
booking service in ``ops/fakes/booking.py`` (at ``KEEL_BOOKING_URL``) — and undo what
was booked when a later step fails (docs/sagas.md).

The hotel and the flight each declare a compensation (cancel the reservation, its input
computed from the reservation the step recorded); the card charge is the last step and
``irreversible``. A declined card (a number ending in ``0002``) is a permanent failure:
the run compensates the flight, then the hotel, and ends ``compensated``.

    keel workflow start travel_booking --input \
        '{"trip": "T1", "card": "4242424242424242", "amount": 420}' --wait

Each write carries the activity's idempotency key, so the service books (or cancels)
once per key however often a worker retries; ``booking_status`` is the status query of
every write (did the request with this key take effect?).

``typed_travel.py`` is this saga written the typed way (docs/workflows.md, "Typed steps").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    Compensation,
    Context,
    OutcomeUnknownError,
    PermanentError,
    RetryPolicy,
    Step,
    TransientError,
    WorkflowDefinition,
    activity,
)
from orchestrator.examples.registry import app

BOOKING_TIMEOUT_S = 2.0


def booking_url() -> str:
    return os.environ.get("KEEL_BOOKING_URL", "http://127.0.0.1:8766").rstrip("/")


class TripInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trip: str = Field(min_length=1, max_length=200)
    card: str = Field(min_length=4, max_length=32)
    amount: float = Field(gt=0)


class Reserve(BaseModel):
    trip: str


class Reservation(BaseModel):
    reservation_id: str
    kind: str


class Charge(BaseModel):
    trip: str
    card: str
    amount: float


class CancelRequest(BaseModel):
    reservation_id: str


class StatusQuery(BaseModel):
    idempotency_key: str
    input: dict[str, Any]


async def _post(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST with the activity's idempotency key; HTTP outcomes as Keel failure classes:
    429/5xx/refused connection transient, other 4xx permanent, a timeout or a connection
    lost after sending unknown (the status query then asks before anything is resent)."""
    import aiohttp  # on use: the orchestrator loads this app without calling it

    key = activity.context().idempotency_key
    timeout = aiohttp.ClientTimeout(total=BOOKING_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                f"{booking_url()}{path}", json=body, headers={"Idempotency-Key": key}
            ) as resp,
        ):
            if resp.status in (200, 201):
                return await resp.json()  # type: ignore[no-any-return]
            text = (await resp.text())[:200]
            if resp.status == 429 or resp.status >= 500:
                raise TransientError(f"booking service answered {resp.status}: {text}")
            raise PermanentError(f"booking service refused ({resp.status}): {text}")
    except aiohttp.ClientConnectorError as exc:
        raise TransientError(f"cannot connect to the booking service: {exc}") from None
    except TimeoutError:
        raise OutcomeUnknownError(
            f"no answer from the booking service within {BOOKING_TIMEOUT_S:g}s"
        ) from None
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError):
        raise OutcomeUnknownError("connection to the booking service lost after sending") from None


@app.activity("reserve_hotel", input=Reserve, output=Reservation)
async def reserve_hotel(req: Reserve) -> Reservation:
    return Reservation.model_validate(await _post("/hotels", req.model_dump()))


@app.activity("reserve_flight", input=Reserve, output=Reservation)
async def reserve_flight(req: Reserve) -> Reservation:
    return Reservation.model_validate(await _post("/flights", req.model_dump()))


@app.activity("charge_card", input=Charge)
async def charge_card(req: Charge) -> dict[str, Any]:
    data = await _post("/charges", req.model_dump())
    return {"charge_id": data["charge_id"]}


@app.activity("cancel_reservation", input=CancelRequest)
async def cancel_reservation(req: CancelRequest) -> dict[str, Any]:
    data = await _post(f"/reservations/{quote(req.reservation_id, safe='')}/cancel", {})
    return {"reservation_id": data["reservation_id"], "cancelled": True}


@app.activity("booking_status", input=StatusQuery)
async def booking_status(query: StatusQuery) -> dict[str, Any]:
    """The status query of every booking write: did the request with this key happen?"""
    import aiohttp  # on use: the orchestrator loads this app without calling it

    url = f"{booking_url()}/requests/{quote(query.idempotency_key, safe='')}"
    timeout = aiohttp.ClientTimeout(total=BOOKING_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
            if resp.status == 200:
                data = await resp.json()
                if data["status"] >= 300:
                    return {"found": False}
                return {"found": True, "result": data["body"]}
            if resp.status == 404:
                return {"found": False}
            raise TransientError(f"booking status query answered {resp.status}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransientError(f"booking status query failed: {exc!r}") from None


WRITE_RETRY = RetryPolicy(
    max_attempts=5, initial_interval_ms=100, backoff_coefficient=2.0, max_interval_ms=1000
)
#: A cancellation is retried longer than a booking: giving up leaves a live reservation.
CANCEL_RETRY = RetryPolicy(
    max_attempts=4, initial_interval_ms=100, backoff_coefficient=2.0, max_interval_ms=500
)


def _trip(ctx: Context[TripInput]) -> dict[str, Any]:
    return {"trip": ctx.input_dict["trip"]}


def _charge(ctx: Context[TripInput]) -> dict[str, Any]:
    i = ctx.input_dict
    return {"trip": i["trip"], "card": i["card"], "amount": i["amount"]}


def _cancel(result: Any) -> dict[str, Any]:
    return {"reservation_id": result["reservation_id"]}


def cancellation(input: Callable[[Any], Any] = _cancel) -> Compensation:
    """Cancel the reservation a step made (its ``input`` computed from the step's result)."""
    return Compensation(
        cancel_reservation,
        input=input,
        retry=CANCEL_RETRY,
        status_query=booking_status,
        start_to_close=timedelta(seconds=5),
    )


def _booked(ctx: Context[TripInput]) -> dict[str, Any]:
    r = ctx.results
    return {
        "hotel": r["hotel"]["reservation_id"],
        "flight": r["flight"]["reservation_id"],
        "charge": r["card"]["charge_id"],
    }


def booking_write(name: str, activity: Callable[..., Any], **options: Any) -> Step:
    """A write to the booking service: retried, asked about when its outcome is unknown."""
    return Step(
        name,
        activity,
        retry=WRITE_RETRY,
        start_to_close=timedelta(seconds=5),
        status_query=booking_status,
        on_exhausted="fail",
        **options,
    )


travel_booking = app.workflow(
    WorkflowDefinition.dag(
        "travel_booking",
        1,
        TripInput,
        [
            booking_write("hotel", reserve_hotel, input=_trip, compensation=cancellation()),
            booking_write(
                "flight", reserve_flight, after="hotel", input=_trip, compensation=cancellation()
            ),
            booking_write("card", charge_card, after="flight", input=_charge, irreversible=True),
        ],
        output=_booked,
        description="Reserve a hotel, then a flight, then charge the card; undo on failure.",
    )
)
