"""Retry-After in the decider: a transient failure that reports ``retry_after_ms`` is
retried no earlier than that (``max(backoff, retry_after)``, capped at
``MAX_RETRY_AFTER_MS``), and the worker reports what a handler's error asked for.

Every check reads the decider's exact events: ``ActivityFailed.retry_after_ms`` and the
retry ``TimerScheduled.fire_at`` against the failure's clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from handlers.llm.chat import ProviderUnavailable
from handlers.sdk.activity_errors import PermanentError, TransientError, retry_after_ms
from orchestrator.domain import (
    CommandRejected,
    Decider,
    RetryPolicy,
    State,
    Step,
    WorkflowDefinition,
)
from orchestrator.domain.lifecycle.activities import MAX_RETRY_AFTER_MS, retry_delay_ms
from orchestrator.domain.model.messages import (
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    Envelope,
    FailActivity,
    FireTimer,
    StartWorkflow,
    TimerScheduled,
    WorkflowFailed,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import FailureClass

T0 = 1_700_000_000_000
POLICY = RetryPolicy(max_attempts=3, initial_interval_ms=100, max_interval_ms=400)


class Empty(BaseModel):
    pass


DEFN = WorkflowDefinition(
    "calls",
    1,
    Empty,
    [State("call", steps=[Step("call", "api.call", retry=POLICY)], complete=lambda ctx: {})],
)


class Run:
    """One run of ``defn`` driven command by command; ``history`` holds its events."""

    def __init__(self, defn: WorkflowDefinition = DEFN) -> None:
        self.d = Decider([defn])
        self.state: WorkflowState | None = None
        self.n = 0
        self.history: list[Envelope[Any]] = []
        self.send(StartWorkflow(defn.name, None, "{}"), T0)

    def send(self, payload: Any, at: int) -> list[Any]:
        self.n += 1
        env: Envelope[Any] = Envelope(
            f"cmd-{self.n}", "wf-1", "", 0, type(payload).__name__, at, payload
        )
        self.state, events = self.d.handle(self.state, env, now_ms=at)
        self.history.extend(events)
        return [e.payload for e in events]

    @property
    def activity_id(self) -> str:
        assert self.state is not None
        return next(iter(self.state.activities))

    def fail(self, attempt: int, at: int, retry_after: int, cls: str = "transient") -> list[Any]:
        return self.send(
            FailActivity(self.activity_id, attempt, cls, "ProviderUnavailable", "429", retry_after),
            at,
        )


def _timer(events: list[Any]) -> TimerScheduled:
    (timer,) = [e for e in events if isinstance(e, TimerScheduled)]
    return timer


def test_the_retry_waits_out_a_retry_after_longer_than_the_backoff() -> None:
    run = Run()
    at = T0 + 50
    events = run.fail(1, at, 2000)
    failed = events[0]
    assert isinstance(failed, ActivityFailed) and failed.retry_after_ms == 2000
    backoff = retry_delay_ms(POLICY, "wf-1", run.activity_id, 1)
    assert backoff <= 100 < 2000
    assert _timer(events).fire_at == at + 2000
    # the timer fires: attempt 2 is dispatched, not earlier
    dispatched = run.send(FireTimer(_timer(events).timer_id), at + 2000)
    assert [e.attempt for e in dispatched if isinstance(e, ActivityScheduled)] == [2]


def test_a_retry_after_shorter_than_the_backoff_changes_nothing() -> None:
    run = Run()
    run.fail(1, T0 + 10, 0)
    timer = next(t for t in run.state.pending_timers())  # type: ignore[union-attr]
    run.send(FireTimer(timer[0]), timer[1])
    at = T0 + 10_000
    backoff = retry_delay_ms(POLICY, "wf-1", run.activity_id, 2)
    assert backoff > 1
    events = run.fail(2, at, 1)
    assert events[0].retry_after_ms == 1
    assert _timer(events).fire_at == at + backoff


def test_a_retry_after_is_capped_at_the_documented_bound_and_recorded_capped() -> None:
    run = Run()
    events = run.fail(1, T0, 10 * MAX_RETRY_AFTER_MS)
    assert events[0].retry_after_ms == MAX_RETRY_AFTER_MS == 3600 * 1000
    assert _timer(events).fire_at == T0 + MAX_RETRY_AFTER_MS


def test_a_negative_retry_after_is_refused_and_nothing_is_written() -> None:
    run = Run()
    with pytest.raises(CommandRejected) as exc:
        run.fail(1, T0, -5)
    assert str(exc.value) == f"retry_after_ms of activity '{run.activity_id}' must be >= 0; got -5"


def test_a_permanent_failure_ignores_its_retry_after() -> None:
    run = Run()
    events = run.fail(1, T0, 5000, cls=FailureClass.PERMANENT)
    assert not any(isinstance(e, TimerScheduled) for e in events)
    assert isinstance(events[-1], WorkflowFailed)


def test_the_last_attempt_is_not_extended_past_the_policy() -> None:
    run = Run()
    now = T0
    for attempt in (1, 2):
        events = run.fail(attempt, now, 1000)
        timer = _timer(events)
        assert timer.fire_at == now + 1000
        run.send(FireTimer(timer.timer_id), timer.fire_at)
        now = timer.fire_at
    events = run.fail(3, now, 1000)
    assert not any(isinstance(e, TimerScheduled) for e in events)
    assert events[-1] == ActivityDeadLettered(run.activity_id, 3, "ProviderUnavailable", "429")


def test_a_handler_error_reports_its_retry_after_in_ms() -> None:
    assert retry_after_ms(ProviderUnavailable("429", 2)) == 2000
    assert retry_after_ms(ProviderUnavailable("429", 0.0011)) == 2  # rounded up, never early
    assert retry_after_ms(ProviderUnavailable("500")) == 0
    assert retry_after_ms(TransientError("busy", float("nan"))) == 0
    assert retry_after_ms(TransientError("busy", float("inf"))) > MAX_RETRY_AFTER_MS
    assert retry_after_ms(PermanentError("no")) == 0
    assert retry_after_ms(ValueError("x")) == 0


def test_an_old_failure_without_retry_after_replays_with_the_backoff() -> None:
    """A v4 record has no retry_after_ms: it reads as 0, the policy alone."""
    run = Run()
    at = T0 + 7
    events = run.send(FailActivity(run.activity_id, 1, "transient", "X", "m"), at)
    assert events[0].retry_after_ms == 0
    assert _timer(events).fire_at == at + retry_delay_ms(POLICY, "wf-1", run.activity_id, 1)
    assert json.loads(json.dumps(events[0].retry_after_ms)) == 0
