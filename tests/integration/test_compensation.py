"""Compensation end to end: real broker, Redis, worker and the booking service's books."""

from __future__ import annotations

import json

import pytest

from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompensationFailed,
    CompensationStarted,
    HumanTaskOpened,
    WorkflowCompensated,
    WorkflowCompensationFailed,
)
from tests.sagas_support import booking, booking_url, trip  # noqa: F401
from tests.support import Services, assert_sound_history, histories


@pytest.fixture
def running(settings, tmp_path, booking_url):  # noqa: F811
    svc = Services(settings, tmp_path, KEEL_BOOKING_URL=booking_url)
    svc.start("orchestrator")
    svc.start("worker")
    try:
        yield svc
    finally:
        svc.stop_all()


def _scheduled(events, activity_type):
    return [
        e.payload
        for e in events
        if isinstance(e.payload, ActivityScheduled) and e.payload.activity_type == activity_type
    ]


def test_a_booked_trip_completes(settings, running, client, booking):  # noqa: F811
    done = client.wait(client.start("travel_booking", trip(1), "trip-ok").workflow_id, 60)
    assert done.status == "completed"
    books = booking.books()
    assert sorted(books["live"]) == sorted([done.output["hotel"], done.output["flight"]])
    assert books["cancellations"] == {}


def test_a_declined_card_cancels_flight_then_hotel_once_each(
    settings,
    running,
    client,
    booking,  # noqa: F811
):
    wf = client.start("travel_booking", trip(2, declined=True), "trip-declined").workflow_id
    done = client.wait(wf, 60)
    assert done.status == "compensated"
    assert "card declined" in done.failure_reason
    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    assert isinstance(events[-1].payload, WorkflowCompensated)
    started = [e.payload for e in events if isinstance(e.payload, CompensationStarted)]
    assert [json.loads(s.plan_json) for s in started] == [["run#1/flight", "run#1/hotel"]]
    cancels = _scheduled(events, "cancel_reservation")
    assert [c.activity_id for c in cancels] == ["run#1/flight/undo", "run#1/hotel/undo"]
    results = {
        e.payload.activity_id: json.loads(e.payload.result_json)
        for e in events
        if type(e.payload).__name__ == "ActivityCompleted"
    }
    hotel, flight = (results[f"run#1/{s}"]["reservation_id"] for s in ("hotel", "flight"))
    books = booking.books()
    assert books["live"] == []
    assert books["cancelled"] == {flight: 1, hotel: 1}
    assert books["cancellations"] == {c.idempotency_key: 1 for c in cancels}
    assert books["charges"] == {}
    # flight first, then hotel: the order the service saw the cancellations
    order = [k for k in books["cancellations"]]
    assert order == [c.idempotency_key for c in cancels]
    assert client.projection.list(status="compensated") == [
        {"workflow_id": wf, "name": "travel_booking", "version": 1, "status": "compensated"}
    ]


def test_a_cancellation_that_keeps_failing_ends_compensation_failed_with_a_task(
    settings,
    running,
    client,
    booking,  # noqa: F811
):
    booking.set_faults(fail_cancels=["flight"])
    wf = client.start("travel_booking", trip(3, declined=True), "trip-stuck").workflow_id
    done = client.wait(wf, 90)
    assert done.status == "compensation_failed"
    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    gave_up = [e.payload for e in events if isinstance(e.payload, CompensationFailed)]
    assert [g.activity_id for g in gave_up] == ["run#1/flight"]
    assert "after 4 attempts" in gave_up[0].reason
    task = next(e.payload for e in events if isinstance(e.payload, HumanTaskOpened))
    end = events[-1].payload
    assert isinstance(end, WorkflowCompensationFailed) and end.task_id == task.task_id
    evidence = json.loads(task.evidence_json)
    [left] = evidence["left_to_undo"]
    flight = left["result"]["reservation_id"]
    assert left["step"] == "flight" and "500" in left["error"]
    books = booking.books()
    assert books["live"] == [flight]  # what the task says is left, and only that
    hotel_cancel = _scheduled(events, "cancel_reservation")[-1]
    assert hotel_cancel.activity_id == "run#1/hotel/undo"
    assert books["cancellations"] == {hotel_cancel.idempotency_key: 1}
    assert client.show(wf).failure_reason.endswith(f"(human task '{task.task_id}')")
