"""Time in the environment moves only by the manual clock: a 30-day wait ends in
milliseconds of wall time, and ``sleep`` fires each timer at its own time."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from orchestrator.domain.model.messages import (
    HumanTaskExpired,
    HumanTaskOpened,
    TimerFired,
    WorkflowCompleted,
)
from orchestrator.testing import RunBlockedError, WorkflowEnvironment

ORDER = {"order_id": "o-1", "amount": 120.0}


def test_a_30_day_approval_expires_in_well_under_two_seconds(env: WorkflowEnvironment) -> None:
    began_wall = time.monotonic()
    began = env.now()
    run = env.start("order_approval", ORDER, workflow_id="order-1")

    assert run.result() == {"status": "rejected", "charge": None}

    assert time.monotonic() - began_wall < 2.0
    (expired,) = run.events(HumanTaskExpired)
    assert expired.outcome == "reject"
    (expired_at,) = run.recorded_at(HumanTaskExpired)
    assert expired_at - began == timedelta(days=30)
    assert env.now() - began == timedelta(days=30)
    (opened,) = run.events(HumanTaskOpened)
    assert opened.expires_at == opened.due_at + 23 * 24 * 3600 * 1000  # due at 7 days


def test_sleep_fires_the_timers_on_its_way_and_stops_at_its_end(env: WorkflowEnvironment) -> None:
    began = env.now()
    run = env.start("ship_later", ORDER)
    env.sleep(timedelta(days=13))
    assert run.status == "waiting"
    assert run.events(TimerFired) == []
    env.sleep(timedelta(days=1))
    assert run.status == "completed"
    (fired_at,) = run.recorded_at(TimerFired)
    assert fired_at - began == timedelta(days=14)
    assert env.now() - began == timedelta(days=14)
    assert run.result() == {"tracking": "tr-o-1"}


def test_result_without_time_skipping_says_what_the_run_waits_for(
    env: WorkflowEnvironment,
) -> None:
    run = env.start("order_approval", ORDER)
    with pytest.raises(RunBlockedError, match="human task approve_order"):
        run.result(skip_time=False)
    with pytest.raises(RunBlockedError, match="nothing in the environment will move it"):
        run.result(limit=timedelta(days=1))  # the first timer (due at 7 days) lies beyond
    assert run.result() == {"status": "rejected", "charge": None}


def test_a_signal_wait_with_no_timer_left_is_blocked_not_hung(env: WorkflowEnvironment) -> None:
    run = env.start("await_delivery", ORDER, workflow_id="o-1")
    env.sleep(timedelta(days=1))
    run.signal("delivered", {"at": "noon"})
    assert run.result() == {"delivered": {"at": "noon"}}
    assert run.events(WorkflowCompleted)


def test_an_undelivered_parcel_fails_the_run_at_its_signal_timeout(
    env: WorkflowEnvironment,
) -> None:
    from orchestrator.testing import WorkflowFailedError

    began = env.now()
    run = env.start("await_delivery", ORDER, workflow_id="o-1")
    with pytest.raises(WorkflowFailedError, match="not delivered within 60 days") as caught:
        run.result()
    assert caught.value.status == "failed"
    assert env.now() - began == timedelta(days=60)
