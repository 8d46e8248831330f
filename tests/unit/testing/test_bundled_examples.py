"""The bundled examples, unit-tested with the kit: no broker, no Redis, no booking service,
and the approval's 3-day expiry in milliseconds (their end-to-end runs on the real stack
stay in tests/integration)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from orchestrator.activity import PermanentError
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    HumanTaskEscalated,
    HumanTaskExpired,
    WorkflowCompensated,
)
from orchestrator.examples import app
from orchestrator.testing import WorkflowEnvironment, WorkflowFailedError

PAYMENT = {"payment_id": "p-1", "account": "DE02", "amount": 950.0, "requested_by": "bob"}


@pytest.fixture
def env() -> Iterator[WorkflowEnvironment]:
    with WorkflowEnvironment(app) as environment:
        yield environment


def test_an_approved_payment_is_paid(env: WorkflowEnvironment) -> None:
    run = env.start("payment_approval", PAYMENT, workflow_id="pay-1")
    task = run.human_task("approve_payment")
    assert task.evidence["payment"]["amount"] == 950.0
    assert run.approve(task, actor="alice").decided
    assert run.result() == {"status": "paid", "payment_id": "p-1", "decided_by": "alice"}


def test_an_unanswered_payment_is_escalated_then_rejected_at_expiry(
    env: WorkflowEnvironment,
) -> None:
    began = env.now()
    run = env.start("payment_approval", PAYMENT, workflow_id="pay-1")
    env.sleep(timedelta(days=1))
    assert run.events(HumanTaskEscalated)
    task = run.human_task()
    assert task.roles == ("finance-approver", "finance-lead")
    assert run.result() == {"status": "rejected", "payment_id": "p-1", "decided_by": None}
    (expired_at,) = run.recorded_at(HumanTaskExpired)
    assert expired_at - began == timedelta(days=3)


def test_the_finance_lead_may_decide_once_it_is_escalated(env: WorkflowEnvironment) -> None:
    run = env.start("payment_approval", PAYMENT, workflow_id="pay-1")
    early = run.approve(run.human_task(), actor="lena", roles=["finance-lead"])
    assert not early.decided and "holds none of the roles" in early.reason
    env.sleep(timedelta(days=1, minutes=1))
    # the very same request again is answered with its first refusal (its message id is
    # a function of the request: docs/connector.md); a new request is decided anew
    again = run.approve(run.human_task(), actor="lena", roles=["finance-lead"])
    assert again == early
    escalated = run.approve(
        run.human_task(), actor="lena", roles=["finance-lead"], reason="escalated to me"
    )
    assert escalated.decided
    assert run.result()["status"] == "paid"


class Booking:
    """The booking service, as stubs: reservations, charges and cancellations by key."""

    def __init__(self) -> None:
        self.live: list[str] = []
        self.cancelled: list[str] = []

    def reserve(self, kind: str) -> Any:
        def stub(req: Any) -> dict[str, str]:
            rid = f"{kind}-{req.trip}"
            self.live.append(rid)
            return {"reservation_id": rid, "kind": kind}

        return stub

    def decline(self, req: Any) -> dict[str, Any]:
        raise PermanentError("card declined")

    def cancel(self, req: Any) -> dict[str, Any]:
        self.live.remove(req.reservation_id)
        self.cancelled.append(req.reservation_id)
        return {"reservation_id": req.reservation_id, "cancelled": True}

    def status(self, query: Any) -> dict[str, Any]:
        return {"found": False}


def test_a_declined_card_cancels_the_flight_then_the_hotel() -> None:
    booking = Booking()
    stubs = {
        "reserve_hotel": booking.reserve("hotel"),
        "reserve_flight": booking.reserve("flight"),
        "charge_card": booking.decline,
        "cancel_reservation": booking.cancel,
        "booking_status": booking.status,
    }
    trip = {"trip": "T1", "card": "4000000000000002", "amount": 420}
    with WorkflowEnvironment(app, activities=stubs) as env:
        run = env.start("travel_booking", trip, workflow_id="trip-1")
        with pytest.raises(WorkflowFailedError, match="card declined") as caught:
            run.result()
        assert caught.value.status == "compensated"
        assert run.events(WorkflowCompensated)
        undo = [
            s.activity_id
            for s in run.events(ActivityScheduled)
            if s.activity_type == "cancel_reservation"
        ]
        assert undo == ["run#1/flight/undo", "run#1/hotel/undo"]
    assert booking.cancelled == ["flight-T1", "hotel-T1"]
    assert booking.live == []


def test_child_runs_on_other_partitions_wait_their_own_timers() -> None:
    with WorkflowEnvironment(app, partitions=4) as env:
        began = env.now()
        run = env.start("timers_batch", {"seconds": [3600, 86400]}, workflow_id="batch-1")
        out = run.result()
        assert len(out["results"]) == 2
        assert env.now() - began == timedelta(days=1)  # both children waited, side by side
        children = {e.workflow_id for e in env.events()} - {"batch-1"}
        assert len(children) == 2
        assert len({env._partition(c) for c in children} | {env._partition("batch-1")}) > 1
        assert all(env.handle(c).status == "completed" for c in children)
