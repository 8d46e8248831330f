"""A timeout of a ``@side_effect`` attempt that started is an unknown outcome (issue 47, item 4).

The worker reports a side effect's start (a heartbeat with ``side_effect=True``). A
start-to-close or heartbeat timeout after that start may have written: without a status
query the run needs attention, never a blind retry, unless the step declares
``on_unknown="retry"``. A timeout before any start report (nobody took the task) stays
transient, and a step whose handler is not a side effect is unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator.domain import Decider, WorkflowState, idempotency_key, retry_delay_ms
from orchestrator.domain.authoring.definitions import RetryPolicy, State, Step, WorkflowDefinition
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.messages import (
    ActivityHeartbeat,
    ActivityResolved,
    ActivityScheduled,
    ActivityTimedOut,
    CompleteActivity,
    Envelope,
    FireTimer,
    HeartbeatActivity,
    ResolveActivity,
    StartWorkflow,
    TimerFired,
    TimerScheduled,
    WorkflowNeedsAttention,
)
from orchestrator.domain.model.state_parts import activity_dict, activity_from

T0 = 1_700_000_000_000
POST = "run#1/post"
QUICK = RetryPolicy(max_attempts=3, initial_interval_ms=1000, backoff_coefficient=2.0)


class Invoice(BaseModel):
    amount: int = 5


def flow(name: str, **options: Any) -> WorkflowDefinition:
    step = Step("post", "post_to_ledger", retry=QUICK, start_to_close=2, **options)
    return WorkflowDefinition(
        name, 1, Invoice, [State("run", steps=[step], complete=lambda ctx: ctx.results["post"])]
    )


DECIDER = Decider(
    [
        flow("ledger"),  # the step: start_to_close 2 s, no status query
        flow("deduped", on_unknown="retry"),
        flow("queued", schedule_to_start=5),
        flow("beating", heartbeat=1),
    ]
)


class Run:
    def __init__(self, name: str) -> None:
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0
        self.t = T0
        self.send(StartWorkflow(name, 1, '{"amount": 5}'), mid="run-1")

    def send(self, payload: Any, at: int | None = None, mid: str | None = None) -> list[Any]:
        self.n += 1
        self.t = self.t if at is None else at
        env = Envelope(
            mid or f"cmd-{self.n}", "wf-1", "", 0, type(payload).__name__, self.t, payload
        )
        self.state, events = DECIDER.handle(self.state, env, now_ms=self.t + 5)
        self.history.extend(events)
        assert DECIDER.fold(self.history) == self.state
        return [e.payload for e in events]

    @property
    def s(self) -> WorkflowState:
        assert self.state is not None
        return self.state

    def fire(self, timer_id: str) -> list[Any]:
        (at,) = [at for t, at in self.s.pending_timers() if t == timer_id]
        return self.send(FireTimer(timer_id), at=at)

    def posts(self) -> int:
        return sum(isinstance(e.payload, ActivityScheduled) for e in self.history)


KEY = idempotency_key("wf-1", "post_to_ledger", 1)
STARTED = HeartbeatActivity(POST, 1, "null", side_effect=True)


def scheduled(attempt: int, **kw: Any) -> ActivityScheduled:
    return ActivityScheduled(POST, "post_to_ledger", "post", '{"amount":5}', 1, attempt, KEY, **kw)


def retry_timer(attempt: int, failed_at: int) -> TimerScheduled:
    at = failed_at + retry_delay_ms(QUICK, "wf-1", POST, attempt)
    return TimerScheduled(f"{POST}/retry/{attempt}", at, f"retry:{POST}")


def s2c(attempt: int) -> str:
    return f"{POST}/timeout/start_to_close/{attempt}"


def test_a_started_side_effect_that_times_out_needs_attention_never_a_retry() -> None:
    run = Run("ledger")
    assert run.send(STARTED, at=T0 + 10, mid="beat-1") == [
        ActivityHeartbeat(POST, 1, "null", side_effect=True)
    ]
    assert run.fire(s2c(1)) == [
        TimerFired(s2c(1)),
        ActivityTimedOut(POST, 1, "start_to_close"),
        WorkflowNeedsAttention(
            POST,
            "the outcome of attempt 1 of step 'post' (post_to_ledger) is unknown "
            "(StartToCloseTimeout: start_to_close timeout expired) and the step has no status "
            f"query: check the external system by key '{KEY}' and settle it with keel workflow "
            "resolve (a step whose remote side deduplicates by the key may declare "
            "on_unknown='retry')",
        ),
    ]
    act = run.s.activities[POST]
    assert (run.s.status, act.status, act.failure_class) == (
        "needs_attention",
        "attention",
        "unknown",
    )
    assert run.s.pending_timers() == [] and run.posts() == 1  # nothing sends it again
    assert run.send(CompleteActivity(POST, 1, '{"late": true}')) == []  # settled by a person
    # the operator found no posting under the key: the same key goes again
    events = run.send(ResolveActivity(POST, "not_found", "", "not in the ledger"))
    assert events == [
        ActivityResolved(POST, "not_found", "not in the ledger"),
        scheduled(2),
        TimerScheduled(s2c(2), run.t + 2_000, f"timeout:start_to_close:{POST}"),
    ]
    assert check_history(run.history) == []


def test_a_heartbeat_timeout_of_a_started_side_effect_needs_attention_too() -> None:
    run = Run("beating")
    run.send(STARTED, at=T0 + 10, mid="beat-1")
    events = run.fire(f"{POST}/timeout/heartbeat/1/1")
    assert events[:2] == [
        TimerFired(f"{POST}/timeout/heartbeat/1/1"),
        ActivityTimedOut(POST, 1, "heartbeat"),
    ]
    assert isinstance(events[2], WorkflowNeedsAttention) and len(events) == 3


def test_on_unknown_retry_sends_the_same_key_again_after_a_started_side_effect_timed_out() -> None:
    run = Run("deduped")
    run.send(STARTED, at=T0 + 10, mid="beat-1")
    assert run.fire(s2c(1)) == [
        TimerFired(s2c(1)),
        ActivityTimedOut(POST, 1, "start_to_close"),
        retry_timer(1, T0 + 2_000),
    ]
    assert run.s.activities[POST].failure_class == "unknown"
    events = run.fire(f"{POST}/retry/1")
    assert events[1] == scheduled(2)  # same logical attempt, same key
    assert run.s.activities[POST].idempotency_key == KEY


def test_a_timeout_before_any_start_report_is_transient() -> None:
    # start_to_close from dispatch, no start report: nobody took the task, retried
    run = Run("ledger")
    assert run.fire(s2c(1)) == [
        TimerFired(s2c(1)),
        ActivityTimedOut(POST, 1, "start_to_close"),
        retry_timer(1, T0 + 2_000),
    ]
    assert run.s.activities[POST].failure_class == "transient"
    # a start report of attempt 1 arriving now is stale; attempt 2 starts afresh
    run.fire(f"{POST}/retry/1")
    assert run.send(STARTED) == []
    assert not run.s.activities[POST].effect_started
    # schedule_to_start: the task queued too long, nothing ran
    queued = Run("queued")
    s2s = f"{POST}/timeout/schedule_to_start/1"
    assert queued.fire(s2s) == [
        TimerFired(s2s),
        ActivityTimedOut(POST, 1, "schedule_to_start"),
        retry_timer(1, T0 + 5_000),
    ]


def test_a_step_whose_handler_is_not_a_side_effect_is_unchanged() -> None:
    run = Run("queued")
    started = run.send(HeartbeatActivity(POST, 1, "null"), at=T0 + 10, mid="beat-1")
    assert started == [
        ActivityHeartbeat(POST, 1, "null"),
        TimerScheduled(s2c(1), T0 + 2_010, f"timeout:start_to_close:{POST}"),
    ]
    assert run.fire(s2c(1)) == [
        TimerFired(s2c(1)),
        ActivityTimedOut(POST, 1, "start_to_close"),
        retry_timer(1, T0 + 2_010),
    ]
    assert run.s.activities[POST].failure_class == "transient"


def test_the_start_of_a_side_effect_survives_a_snapshot() -> None:
    run = Run("ledger")
    run.send(STARTED, at=T0 + 10, mid="beat-1")
    act = run.s.activities[POST]
    assert act.effect_started and activity_from(activity_dict(act)) == act
    old = {k: v for k, v in activity_dict(act).items() if k != "effect_started"}
    assert not activity_from(old).effect_started  # a snapshot from before the field
