"""A throttled attempt (its activity type over a per-type limit, docs/limits.md) is
dispatched again after exactly its ``retry_after_ms``, however many times, outside the
step's ``max_attempts`` and ``max_elapsed``: it never ran, so it spends no retry. The
``ActivityFailed`` with class ``throttled`` stays in history, and the history keeps the
invariants (``orchestrator/domain/history/invariants.py``).
"""

from __future__ import annotations

from orchestrator.domain import RetryPolicy, State, Step, WorkflowDefinition
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    CompleteActivity,
    FailActivity,
    FireTimer,
    TimerScheduled,
    WorkflowCompleted,
)
from orchestrator.domain.model.vocabulary import FailureClass
from tests.unit.domain import test_retry_after as retry_after

T0 = retry_after.T0
#: One attempt only, and a second of elapsed time: any throttle that counted would fail.
ONE_SHOT = RetryPolicy(max_attempts=1, initial_interval_ms=100, max_elapsed=1)


def _defn(policy: RetryPolicy = ONE_SHOT, status_query: str | None = None) -> WorkflowDefinition:
    step = Step("call", "api.call", retry=policy, status_query=status_query)
    return WorkflowDefinition(
        "limited", 1, retry_after.Empty, [State("call", steps=[step], complete=lambda ctx: {})]
    )


DEFN = _defn()


class Run(retry_after.Run):
    def __init__(self, defn: WorkflowDefinition = DEFN) -> None:
        super().__init__(defn)

    def throttle(self, attempt: int, at: int, wait_ms: int) -> TimerScheduled:
        events = self.send(
            FailActivity(
                self.activity_id, attempt, FailureClass.THROTTLED, "Throttled", "over", wait_ms
            ),
            at,
        )
        failed, timer = events
        assert isinstance(failed, ActivityFailed) and failed.failure_class == "throttled"
        assert isinstance(timer, TimerScheduled) and timer.fire_at == at + wait_ms
        return timer


def test_throttled_attempts_never_spend_max_attempts_or_max_elapsed() -> None:
    run = Run()
    at = T0
    for attempt in range(1, 8):  # seven throttles, the last a minute after the start
        timer = run.throttle(attempt, at + 10, 10_000)
        at = timer.fire_at
        dispatched = run.send(FireTimer(timer.timer_id), at)
        assert [e.attempt for e in dispatched if isinstance(e, ActivityScheduled)] == [attempt + 1]
    events = run.send(CompleteActivity(run.activity_id, 8, "{}", 0), at + 5)
    assert any(isinstance(e, ActivityCompleted) for e in events)
    assert any(isinstance(e, WorkflowCompleted) for e in events)
    throttled = [e.payload for e in run.history if isinstance(e.payload, ActivityFailed)]
    assert [f.failure_class for f in throttled] == ["throttled"] * 7
    assert check_history(run.history) == []


def test_a_real_failure_still_meets_the_policy() -> None:
    run = Run()
    events = run.send(
        FailActivity(run.activity_id, 1, FailureClass.TRANSIENT, "Boom", "down", 0), T0 + 5
    )
    assert any(isinstance(e, ActivityDeadLettered) for e in events)  # on_exhausted


def test_a_real_failure_after_throttles_has_the_whole_budget() -> None:
    run = Run(_defn(RetryPolicy(max_attempts=2, initial_interval_ms=100)))
    timer = run.throttle(1, T0 + 10, 100)
    run.send(FireTimer(timer.timer_id), timer.fire_at)
    events = run.send(
        FailActivity(run.activity_id, 2, FailureClass.TRANSIENT, "Boom", "down", 0),
        timer.fire_at + 5,
    )
    # the one real failure of two allowed attempts: retried, not failed
    assert any(isinstance(e, TimerScheduled) for e in events)


def test_a_throttled_status_query_waits_without_spending_its_own_retries() -> None:
    run = Run(_defn(status_query="api.status"))
    aid = run.activity_id
    run.send(FailActivity(aid, 1, FailureClass.UNKNOWN, "Lost", "mid-call", 0), T0 + 5)
    query, at = f"{aid}/query/1", T0 + 5
    for attempt in range(1, 8):
        events = run.send(
            FailActivity(query, attempt, FailureClass.THROTTLED, "Throttled", "over", 500), at
        )
        [timer] = [e for e in events if isinstance(e, TimerScheduled)]
        assert timer.fire_at == at + 500
        at = timer.fire_at
        again = run.send(FireTimer(timer.timer_id), at)
        assert [(e.activity_id, e.attempt) for e in again if isinstance(e, ActivityScheduled)] == [
            (query, attempt + 1)
        ]
    assert check_history(run.history) == []
