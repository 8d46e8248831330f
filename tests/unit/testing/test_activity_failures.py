"""Scripted failures of each class go through the worker's real classification and the
engine's real retry, status-query and failure paths."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.activity import OutcomeUnknownError, PermanentError, TransientError
from orchestrator.domain.model.messages import ActivityFailed, ActivityScheduled, TimerFired
from orchestrator.testing import WorkflowEnvironment, WorkflowFailedError
from tests.unit.testing.kit_app import LEDGER, charge_card

ORDER = {"order_id": "o-1", "amount": 120.0}


def test_a_transient_failure_is_retried_after_its_backoff(env: WorkflowEnvironment) -> None:
    began = env.now()
    env.fail(charge_card, TransientError("card network answered 503"), times=2)
    run = env.start("charge_order", ORDER, workflow_id="o-1")

    assert run.result() == {"status": "charged", "charge": "ch-o-1"}

    failed = run.events(ActivityFailed)
    assert [f.failure_class for f in failed] == ["transient", "transient"]
    assert [s.attempt for s in run.events(ActivityScheduled)] == [1, 2, 3]
    fired = run.recorded_at(TimerFired)
    assert len(fired) == 2 and began < fired[0] < fired[1]  # backoff waited on the clock
    assert fired[1] - began <= timedelta(minutes=3)  # 60 s, then 120 s at most (full jitter)
    assert env.calls(charge_card) == 3
    assert len(LEDGER) == 1


def test_a_permanent_failure_fails_the_run_without_a_retry(env: WorkflowEnvironment) -> None:
    env.fail("charge_card", PermanentError("card declined"))
    run = env.start("charge_order", ORDER, workflow_id="o-1")

    with pytest.raises(WorkflowFailedError, match="card declined") as caught:
        run.result()

    assert caught.value.status == "failed"
    assert [f.failure_class for f in run.events(ActivityFailed)] == ["permanent"]
    assert env.calls(charge_card) == 1
    assert LEDGER == {}


def test_an_unknown_outcome_is_resolved_by_the_status_query(env: WorkflowEnvironment) -> None:
    # the charge is written, then its answer is lost: only the status query can tell
    env.fail(charge_card, OutcomeUnknownError("timed out after sending"), after_call=True)
    run = env.start("charge_order", ORDER, workflow_id="o-1")

    assert run.result() == {"status": "charged", "charge": "ch-o-1"}

    assert [f.failure_class for f in run.events(ActivityFailed)] == ["unknown"]
    scheduled = [s.activity_type for s in run.events(ActivityScheduled)]
    assert scheduled == ["charge_card", "charge_status"]  # asked, not charged again
    assert env.calls(charge_card) == 1
    assert env.calls("charge_status") == 1
    assert len(LEDGER) == 1


def test_an_unknown_outcome_that_did_not_happen_is_tried_again(env: WorkflowEnvironment) -> None:
    env.fail(charge_card, OutcomeUnknownError("connection reset before sending"))
    run = env.start("charge_order", ORDER, workflow_id="o-1")

    assert run.result() == {"status": "charged", "charge": "ch-o-1"}

    scheduled = [s.activity_type for s in run.events(ActivityScheduled)]
    assert scheduled[:2] == ["charge_card", "charge_status"]
    assert scheduled.count("charge_card") == 2
    assert len(LEDGER) == 1


def test_a_stub_stands_for_a_handler_with_its_models_and_marks(env: WorkflowEnvironment) -> None:
    from tests.unit.testing.kit_app import app

    seen = []

    def fake_charge(order: object) -> dict[str, object]:
        seen.append(order)
        return {"charge_id": "fake-1", "amount": 1.0}

    with WorkflowEnvironment(app, activities={charge_card: fake_charge}) as stubbed:
        run = stubbed.start("charge_order", ORDER)
        assert run.result() == {"status": "charged", "charge": "fake-1"}
    assert type(seen[0]).__name__ == "Order"  # validated against the handler's input model
    assert LEDGER == {}
