"""Activity failures on exact event sequences (DESIGN §7).

Timeouts on durable timers, bounded jittered retries, permanent and non-retryable
errors, ``max_elapsed``, unknown outcomes settled by a status query or an operator,
dead letters and redrives, late and stale reports, and snapshots of all of it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import (
    CommandRejected,
    Decider,
    DefinitionError,
    WorkflowState,
    idempotency_key,
    retry_delay_ms,
)
from orchestrator.domain.authoring.definitions import (
    RetryPolicy,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    canonical_json,
)
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityHeartbeat,
    ActivityRedriven,
    ActivityResolved,
    ActivityScheduled,
    ActivityTimedOut,
    CancelWorkflow,
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    RedriveActivity,
    ResolveActivity,
    StartWorkflow,
    StateEntered,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowNeedsAttention,
)

T0 = 1_700_000_000_000
PAY = "run#1/pay"
QUERY = f"{PAY}/query/1"
PAY_INPUT = '{"amount":5}'


class Amount(BaseModel):
    amount: int = 5


def _paid(ctx: Any) -> Any:
    return ctx.results["pay"]


def pay_flow(name: str, step: Step, *, on_failure: bool = False) -> WorkflowDefinition:
    """One state paying; with ``on_failure`` a repair state records the failures."""
    states = [
        State("run", steps=[step], complete=_paid, on_failure="repair" if on_failure else None)
    ]
    if on_failure:
        states.append(
            State(
                "repair",
                steps=[Step("fix", "fix", input=lambda ctx: ctx.failures)],
                fail="repaired",
            )
        )
    return WorkflowDefinition(name, 1, Amount, states)


QUICK = RetryPolicy(max_attempts=3, initial_interval_ms=1000, backoff_coefficient=2.0)

timed = pay_flow(
    "timed",
    Step("pay", "charge", retry=QUICK, schedule_to_start=5, start_to_close=30, heartbeat=10),
)
closing = pay_flow("closing", Step("pay", "charge", retry=QUICK, start_to_close=30))
queried = pay_flow(
    "queried",
    Step("pay", "charge", retry=QUICK, start_to_close=30, status_query="charge_status"),
)
queried_repair = pay_flow(
    "queried_repair",
    Step("pay", "charge", retry=QUICK, status_query="charge_status"),
    on_failure=True,
)
queried_picky = pay_flow(
    "queried_picky",
    Step(
        "pay",
        "charge",
        retry=RetryPolicy(non_retryable=frozenset({"ConnectionReset"})),
        status_query="charge_status",
    ),
)
hb_queried = pay_flow(
    "hb_queried", Step("pay", "charge", retry=QUICK, heartbeat=10, status_query="charge_status")
)
GROWING = RetryPolicy(max_attempts=6, initial_interval_ms=1000, max_interval_ms=5000)
growing = pay_flow("growing", Step("pay", "charge", retry=GROWING))
PICKY = RetryPolicy(max_attempts=5, non_retryable=frozenset({"CardDeclined"}))
picky = pay_flow("picky", Step("pay", "charge", retry=PICKY))
picky_repair = pay_flow("picky_repair", Step("pay", "charge", retry=PICKY), on_failure=True)
ELAPSED = RetryPolicy(
    max_attempts=10, initial_interval_ms=10_000, max_interval_ms=40_000, max_elapsed=60
)
elapsed = pay_flow("elapsed", Step("pay", "charge", retry=ELAPSED, on_exhausted="fail"))
TWICE = RetryPolicy(max_attempts=2, initial_interval_ms=100)
parked = pay_flow("parked", Step("pay", "charge", retry=TWICE))
deduped = pay_flow("deduped", Step("pay", "charge", retry=QUICK, on_unknown="retry"))
both = WorkflowDefinition(
    "both",
    1,
    Amount,
    [
        State(
            "run",
            steps=[
                Step("pay", "charge", retry=QUICK, heartbeat=10, status_query="charge_status"),
                Step("ship", "ship", retry=RetryPolicy(max_attempts=1)),
            ],
            transitions=[Transition("done")],
        ),
        State("done", complete=lambda ctx: ctx.results),
    ],
)

DECIDER = Decider(
    [
        timed,
        closing,
        queried,
        queried_repair,
        queried_picky,
        hb_queried,
        growing,
        picky,
        picky_repair,
        elapsed,
        parked,
        deduped,
        both,
    ]
)


class Harness:
    def __init__(self, wid: str = "wf-1") -> None:
        self.wid = wid
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0
        self.t = T0

    def env(self, payload: Any, at: int | None, mid: str | None) -> Envelope[Any]:
        self.n += 1
        if at is not None:
            self.t = at
        return Envelope(
            mid or f"cmd-{self.n}", self.wid, "", 0, type(payload).__name__, self.t, payload
        )

    def send(self, payload: Any, at: int | None = None, mid: str | None = None) -> list[Any]:
        return self.send_env(self.env(payload, at, mid))

    def send_env(self, env: Envelope[Any]) -> list[Any]:
        self.state, events = DECIDER.handle(self.state, env, now_ms=self.t + 5)
        self.history.extend(events)
        assert DECIDER.fold(self.history) == self.state
        return [e.payload for e in events]

    def start(self, name: str) -> list[Any]:
        return self.send(StartWorkflow(name, 1, '{"amount": 5}'), mid="run-1")

    @property
    def s(self) -> WorkflowState:
        assert self.state is not None
        return self.state

    def timer(self, prefix: str) -> tuple[str, int]:
        (found,) = [(t, at) for t, at in self.s.pending_timers() if t.startswith(prefix)]
        return found

    def fire(self, prefix: str) -> list[Any]:
        timer_id, fire_at = self.timer(prefix)
        return self.send(FireTimer(timer_id), at=max(self.t, fire_at))


def key(activity_type: str = "charge", n: int = 1) -> str:
    return idempotency_key("wf-1", activity_type, n)


def scheduled(attempt: int, **kw: Any) -> ActivityScheduled:
    return ActivityScheduled(PAY, "charge", "pay", PAY_INPUT, 1, attempt, key(), **kw)


def timeout(kind: str, attempt: int, fire_at: int, suffix: str = "") -> TimerScheduled:
    return TimerScheduled(
        f"{PAY}/timeout/{kind}/{attempt}{suffix}", fire_at, f"timeout:{kind}:{PAY}"
    )


def retry_timer(attempt: int, failed_at: int, policy: RetryPolicy = QUICK) -> TimerScheduled:
    delay = retry_delay_ms(policy, "wf-1", PAY, attempt)
    return TimerScheduled(f"{PAY}/retry/{attempt}", failed_at + delay, f"retry:{PAY}")


def rejected(h: Harness, payload: Any) -> str:
    with pytest.raises(CommandRejected) as exc:
        h.send(payload)
    return str(exc.value)


def dispatches_of_the_write(h: Harness) -> int:
    return sum(
        isinstance(e.payload, ActivityScheduled) and e.payload.activity_id == PAY for e in h.history
    )


# ---------------------------------------------------------------------------
# Timeouts
# ---------------------------------------------------------------------------


def test_heartbeats_arm_and_rearm_timers_and_a_missed_heartbeat_times_out() -> None:
    h = Harness()
    events = h.start("timed")
    assert events[2:] == [
        scheduled(1, heartbeat_ms=10_000, report_start=True),
        timeout("schedule_to_start", 1, T0 + 5_000),
    ]
    # the first heartbeat: started -> schedule_to_start off, start_to_close and heartbeat on
    events = h.send(HeartbeatActivity(PAY, 1, '{"done": 0.1}'), at=T0 + 1_000, mid="hb-1")
    assert events == [
        ActivityHeartbeat(PAY, 1, '{"done": 0.1}'),
        timeout("start_to_close", 1, T0 + 31_000),
        timeout("heartbeat", 1, T0 + 11_000, "/1"),
    ]
    assert [t for t, _ in h.s.pending_timers()] == [
        f"{PAY}/timeout/heartbeat/1/1",
        f"{PAY}/timeout/start_to_close/1",
    ]
    assert h.send(FireTimer(f"{PAY}/timeout/schedule_to_start/1"), at=T0 + 5_000) == []
    # every later heartbeat re-arms the heartbeat deadline as a new timer
    events = h.send(HeartbeatActivity(PAY, 1, "{}"), at=T0 + 6_000, mid="hb-2")
    assert events == [ActivityHeartbeat(PAY, 1, "{}"), timeout("heartbeat", 1, T0 + 16_000, "/2")]
    assert h.send(FireTimer(f"{PAY}/timeout/heartbeat/1/1"), at=T0 + 11_000) == []
    # redelivered and stale heartbeats write nothing
    assert h.send_env(h.env(HeartbeatActivity(PAY, 1, "{}"), None, "hb-2")) == []
    assert h.send(HeartbeatActivity(PAY, 2, "{}")) == []
    # one naming an activity the run never scheduled (another run's) is refused
    assert rejected(h, HeartbeatActivity("run#1/nope", 1, "{}")) == (
        "run 'run-1' of workflow 'wf-1' has no activity 'run#1/nope'; heartbeat of "
        "activity 'run#1/nope' attempt 1 refused"
    )
    # the missed heartbeat: a transient timeout, retried after a backoff
    events = h.send(FireTimer(f"{PAY}/timeout/heartbeat/1/2"), at=T0 + 16_000)
    assert events == [
        TimerFired(f"{PAY}/timeout/heartbeat/1/2"),
        ActivityTimedOut(PAY, 1, "heartbeat"),
        retry_timer(1, T0 + 16_000),
    ]
    assert [t for t, _ in h.s.pending_timers()] == [f"{PAY}/retry/1"]  # start_to_close off
    assert h.send(FireTimer(f"{PAY}/timeout/start_to_close/1"), at=T0 + 31_000) == []
    assert h.send(HeartbeatActivity(PAY, 1, "{}")) == []  # the timed-out attempt: stale
    events = h.fire(f"{PAY}/retry/1")
    assert events == [
        TimerFired(f"{PAY}/retry/1"),
        scheduled(2, heartbeat_ms=10_000, report_start=True),
        timeout("schedule_to_start", 2, h.t + 5_000),
    ]
    events = h.send(CompleteActivity(PAY, 2, '{"ok": true}'))
    assert events == [ActivityCompleted(PAY, 2, '{"ok": true}'), WorkflowCompleted('{"ok":true}')]
    assert h.send(FireTimer(f"{PAY}/timeout/schedule_to_start/2")) == []


def test_schedule_to_start_timeout_is_transient() -> None:
    h = Harness()
    h.start("timed")
    events = h.fire(f"{PAY}/timeout/schedule_to_start/1")
    assert events == [
        TimerFired(f"{PAY}/timeout/schedule_to_start/1"),
        ActivityTimedOut(PAY, 1, "schedule_to_start"),
        retry_timer(1, T0 + 5_000),
    ]
    act = h.s.activities[PAY]
    assert (act.status, act.failure_class, act.error_type) == (
        "backoff",
        "transient",
        "ScheduleToStartTimeout",
    )


def test_start_to_close_runs_from_dispatch_without_start_reports() -> None:
    h = Harness()
    events = h.start("closing")
    assert events[2:] == [scheduled(1), timeout("start_to_close", 1, T0 + 30_000)]
    events = h.fire(f"{PAY}/timeout/start_to_close/1")
    assert events == [
        TimerFired(f"{PAY}/timeout/start_to_close/1"),
        ActivityTimedOut(PAY, 1, "start_to_close"),
        retry_timer(1, T0 + 30_000),
    ]
    # completed in time: the timer is gone and firing it does nothing
    h2 = Harness("wf-2")
    h2.start("closing")
    h2.send(CompleteActivity(PAY, 1, "{}"), at=T0 + 100)
    assert h2.s.status == "completed" and h2.s.pending_timers() == []
    assert h2.send(FireTimer(f"{PAY}/timeout/start_to_close/1"), at=T0 + 30_000) == []


def test_late_reports_of_a_timed_out_attempt_are_dropped_and_decide_nothing() -> None:
    h = Harness()
    h.start("closing")
    h.fire(f"{PAY}/timeout/start_to_close/1")
    before = h.s
    assert h.send(CompleteActivity(PAY, 1, '{"late": true}')) == []
    act = h.s.activities[PAY]
    assert (act.status, act.attempt, act.result_json) == ("backoff", 1, None)
    assert h.s.step_results == {} and h.s.timers == before.timers and h.s.status == "running"
    assert h.send(FailActivity(PAY, 1, "transient", "E", "m")) == []
    assert h.send(CompleteActivity(PAY, 7, "{}")) == []  # never timed out, not current
    h.fire(f"{PAY}/retry/1")
    # attempt 2 times out too; its late failure is dropped, and attempt 3 completes
    h.fire(f"{PAY}/timeout/start_to_close/2")
    assert h.send(FailActivity(PAY, 2, "permanent", "Boom", "late")) == []
    assert h.s.status == "running" and h.s.activities[PAY].status == "backoff"
    h.fire(f"{PAY}/retry/2")
    # attempt 1's late result while attempt 3 runs: still dropped, attempt 3 decides
    assert h.send(CompleteActivity(PAY, 1, '{"late": true}')) == []
    events = h.send(CompleteActivity(PAY, 3, '{"n": 3}'))
    assert events == [ActivityCompleted(PAY, 3, '{"n": 3}'), WorkflowCompleted('{"n":3}')]
    assert check_history(h.history) == []


def test_an_unknown_outcome_without_a_status_query_needs_attention_never_a_retry() -> None:
    h = Harness()
    h.start("closing")
    events = h.send(FailActivity(PAY, 1, "unknown", "OutcomeUnknownError", "in doubt"))
    assert events == [
        ActivityFailed(PAY, 1, "unknown", "OutcomeUnknownError", "in doubt"),
        WorkflowNeedsAttention(
            PAY,
            "the outcome of attempt 1 of step 'pay' (charge) is unknown (OutcomeUnknownError: "
            "in doubt) and the step has no status query: check the external system by key "
            f"'{key()}' and settle it with keel workflow resolve (a step whose remote side "
            "deduplicates by the key may declare on_unknown='retry')",
        ),
    ]
    assert h.s.status == "needs_attention" and h.s.activities[PAY].status == "attention"
    assert h.s.pending_timers() == []  # nothing will dispatch the write on its own
    # the operator checked the remote side: not found -> the same key goes again
    events = h.send(ResolveActivity(PAY, "not_found", "", "no charge under the key"))
    assert events[1] == scheduled(2)
    assert h.s.status == "running"
    assert check_history(h.history) == []


def test_on_unknown_retry_is_the_explicit_opt_in_to_dispatch_the_same_key_again() -> None:
    h = Harness()
    h.start("deduped")
    events = h.send(FailActivity(PAY, 1, "unknown", "OutcomeUnknownError", "in doubt"))
    assert [type(e).__name__ for e in events] == ["ActivityFailed", "TimerScheduled"]
    h.fire(f"{PAY}/retry/1")
    assert h.history[-1].payload == scheduled(2)


def test_on_unknown_is_validated_and_names_the_choice() -> None:
    with pytest.raises(DefinitionError) as exc:
        pay_flow("bad", Step("pay", "charge", on_unknown="guess"))
    assert str(exc.value) == (
        "workflow 'bad' v1: state 'run': step 'pay': on_unknown must be one of attention, retry"
    )
    with pytest.raises(DefinitionError) as exc:
        pay_flow("bad", Step("pay", "charge", status_query="charge_status", on_unknown="retry"))
    assert str(exc.value) == (
        "workflow 'bad' v1: state 'run': step 'pay': on_unknown='retry' contradicts "
        "status_query 'charge_status' (an unknown outcome is asked about, never retried "
        "blindly): drop one"
    )
    # the opt-in is part of the definition's digest; the default leaves old digests alone
    plain = pay_flow("d", Step("pay", "charge")).digest
    assert pay_flow("d", Step("pay", "charge", on_unknown="attention")).digest == plain
    assert pay_flow("d", Step("pay", "charge", on_unknown="retry")).digest != plain


# ---------------------------------------------------------------------------
# Policy: backoff, permanent, non-retryable, max_elapsed
# ---------------------------------------------------------------------------


def test_retry_delays_are_jittered_within_a_growing_cap() -> None:
    caps = [1000, 2000, 4000, 5000, 5000]
    worst = [0] * len(caps)
    for w in range(12):
        h = Harness(f"wf-{w}")
        h.start("growing")
        for attempt, cap in enumerate(caps, start=1):
            failed_at = h.t + 100
            events = h.send(FailActivity(PAY, attempt, "transient", "HTTP503", "busy"), failed_at)
            timer = events[-1]
            assert isinstance(timer, TimerScheduled)
            assert timer.timer_id == f"{PAY}/retry/{attempt}"
            delay = timer.fire_at - failed_at
            assert 0 <= delay <= cap
            assert delay == retry_delay_ms(GROWING, f"wf-{w}", PAY, attempt)
            worst[attempt - 1] = max(worst[attempt - 1], delay)
            assert h.fire(f"{PAY}/retry/")[1] == ActivityScheduled(
                PAY,
                "charge",
                "pay",
                PAY_INPUT,
                1,
                attempt + 1,
                idempotency_key(f"wf-{w}", "charge", 1),
            )
        events = h.send(FailActivity(PAY, 6, "transient", "HTTP503", "busy"))
        assert events[-1] == ActivityDeadLettered(PAY, 6, "HTTP503", "busy")
    assert worst[0] < worst[1] < worst[2]  # the delays grow with the cap
    assert worst[2] > 2000 and worst[3] > 4000


def test_permanent_failure_is_never_retried() -> None:
    h = Harness()
    h.start("picky")
    events = h.send(FailActivity(PAY, 1, "permanent", "Forbidden", "no access"))
    assert events == [
        ActivityFailed(PAY, 1, "permanent", "Forbidden", "no access"),
        WorkflowFailed("step 'pay' (charge) failed permanently: Forbidden: no access"),
    ]
    assert dispatches_of_the_write(h) == 1


def test_non_retryable_error_types_are_permanent_even_when_transient() -> None:
    h = Harness()
    h.start("picky")
    events = h.send(FailActivity(PAY, 1, "transient", "CardDeclined", "declined"))
    assert events == [
        ActivityFailed(PAY, 1, "transient", "CardDeclined", "declined"),
        WorkflowFailed(
            "step 'pay' (charge) failed permanently: CardDeclined (non-retryable): declined"
        ),
    ]
    h2 = Harness()
    h2.start("picky_repair")
    events = h2.send(FailActivity(PAY, 1, "unknown", "CardDeclined", "declined"))
    assert events[1:] == [
        StateEntered("repair", 1),
        ActivityScheduled(
            "repair#1/fix",
            "fix",
            "fix",
            '{"pay":{"error_type":"CardDeclined","failure_class":"unknown","message":"declined"}}',
            1,
            1,
            key("fix"),
        ),
    ]
    h3 = Harness()
    h3.start("picky")
    assert isinstance(h3.send(FailActivity(PAY, 1, "transient", "Other", "x"))[-1], TimerScheduled)


def test_max_elapsed_bounds_the_retries_from_the_first_dispatch() -> None:
    first_dispatch = T0 + 5  # the ActivityScheduled's recorded time
    limit = first_dispatch + 60_000
    d2 = retry_delay_ms(ELAPSED, "wf-1", PAY, 2)
    for late_by, retried in ((0, True), (1, False)):
        h = Harness()
        h.start("elapsed")
        h.send(FailActivity(PAY, 1, "transient", "Timeout", "slow"), at=T0 + 1_000)
        h.fire(f"{PAY}/retry/1")
        failed_at = limit - d2 + late_by
        events = h.send(FailActivity(PAY, 2, "transient", "Timeout", "slow"), at=failed_at)
        if retried:
            assert events[-1] == retry_timer(2, failed_at, ELAPSED)
            assert events[-1].fire_at == limit
        else:
            assert events == [
                ActivityFailed(PAY, 2, "transient", "Timeout", "slow"),
                WorkflowFailed(
                    "step 'pay' (charge) failed after 2 attempts (max_elapsed of 60000 ms "
                    "used up): Timeout: slow"
                ),
            ]


# ---------------------------------------------------------------------------
# Unknown outcome: the status query
# ---------------------------------------------------------------------------


def query_scheduled(attempt: int = 1, n: int = 1) -> ActivityScheduled:
    return ActivityScheduled(
        f"{PAY}/query/{attempt}",
        "charge_status",
        "pay",
        canonical_json({"idempotency_key": key(), "input": {"amount": 5}}),
        n,
        1,
        key("charge_status", n),
    )


def test_unknown_outcome_runs_the_query_and_found_completes_with_one_dispatch() -> None:
    h = Harness()
    h.start("queried")
    events = h.fire(f"{PAY}/timeout/start_to_close/1")
    assert events == [
        TimerFired(f"{PAY}/timeout/start_to_close/1"),
        ActivityTimedOut(PAY, 1, "start_to_close"),
        query_scheduled(),
    ]
    assert h.s.activities[PAY].status == "querying" and h.s.status == "running"
    assert h.s.activities[QUERY].parent == PAY
    # the write's own late report is dropped: the query settles attempt 1, once
    assert h.send(CompleteActivity(PAY, 1, '{"receipt": "late"}')) == []
    assert h.s.activities[PAY].status == "querying"
    events = h.send(CompleteActivity(QUERY, 1, '{"found": true, "result": {"receipt": "r1"}}'))
    assert events == [
        ActivityCompleted(QUERY, 1, '{"found": true, "result": {"receipt": "r1"}}'),
        ActivityCompleted(PAY, 1, '{"receipt":"r1"}'),
        WorkflowCompleted('{"receipt":"r1"}'),
    ]
    assert dispatches_of_the_write(h) == 1


def test_unknown_failure_report_runs_the_query_too() -> None:
    h = Harness()
    h.start("queried")
    events = h.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "after send"))
    assert events == [
        ActivityFailed(PAY, 1, "unknown", "ConnectionReset", "after send"),
        query_scheduled(),
    ]
    assert h.s.pending_timers() == []  # the write's own timeout is off while we ask
    assert h.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "again")) == []


def test_heartbeat_timeout_of_a_queried_step_is_an_unknown_outcome() -> None:
    h = Harness()
    h.start("hb_queried")
    h.send(HeartbeatActivity(PAY, 1, "{}"))
    events = h.fire(f"{PAY}/timeout/heartbeat/1/1")
    assert events[1:] == [ActivityTimedOut(PAY, 1, "heartbeat"), query_scheduled()]
    assert h.s.activities[PAY].failure_class == "unknown"


def test_not_found_retries_the_same_logical_attempt_with_the_same_key() -> None:
    h = Harness()
    h.start("queried")
    h.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "after send"), at=T0 + 10)
    events = h.send(CompleteActivity(QUERY, 1, '{"found": false}'), at=T0 + 20)
    assert events == [ActivityCompleted(QUERY, 1, '{"found": false}'), retry_timer(1, T0 + 20)]
    assert h.s.activities[PAY].status == "backoff"
    events = h.fire(f"{PAY}/retry/1")
    assert events[1:] == [scheduled(2), timeout("start_to_close", 2, h.t + 30_000)]
    assert events[1].idempotency_key == h.history[2].payload.idempotency_key == key()
    # the second unknown outcome gets its own query (its own key)
    events = h.send(FailActivity(PAY, 2, "unknown", "ConnectionReset", "again"))
    assert events[1] == query_scheduled(attempt=2, n=2)
    h.send(CompleteActivity(f"{PAY}/query/2", 1, '{"found": false}'))
    h.fire(f"{PAY}/retry/2")
    h.send(FailActivity(PAY, 3, "unknown", "ConnectionReset", "third"))
    events = h.send(CompleteActivity(f"{PAY}/query/3", 1, '{"found": false}'))
    assert events[1:] == [ActivityDeadLettered(PAY, 3, "ConnectionReset", "third")]
    assert h.s.status == "needs_attention"
    assert dispatches_of_the_write(h) == 3


def test_unknown_outcome_of_a_non_retryable_error_is_queried_then_fails() -> None:
    """Never guess: the query runs first; "not found" then fails instead of retrying."""
    h = Harness()
    h.start("queried_picky")
    events = h.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "after send"))
    assert events[-1] == query_scheduled()
    events = h.send(CompleteActivity(QUERY, 1, '{"found": false}'))
    assert events[1:] == [
        WorkflowFailed(
            "step 'pay' (charge) failed permanently: ConnectionReset (non-retryable): after send"
        )
    ]
    assert dispatches_of_the_write(h) == 1


def exhaust_the_query(h: Harness, name: str = "queried") -> list[Any]:
    h.start(name)
    h.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "after send"))
    for attempt in (1, 2):
        events = h.send(FailActivity(QUERY, attempt, "transient", "HTTP503", "down"))
        assert events[-1] == TimerScheduled(
            f"{QUERY}/retry/{attempt}",
            h.t + retry_delay_ms(RetryPolicy(), "wf-1", QUERY, attempt),
            f"retry:{QUERY}",
        )
        assert h.s.activities[PAY].status == "querying"
        h.fire(f"{QUERY}/retry/")
    return h.send(FailActivity(QUERY, 3, "transient", "HTTP503", "down"))


def test_exhausted_query_needs_attention() -> None:
    h = Harness()
    events = exhaust_the_query(h)
    assert events == [
        ActivityFailed(QUERY, 3, "transient", "HTTP503", "down"),
        WorkflowNeedsAttention(
            PAY,
            "status query 'charge_status' of activity 'run#1/pay' failed after 3 attempts: "
            "HTTP503: down; the outcome of attempt 1 is unknown",
        ),
    ]
    assert h.s.status == "needs_attention" and h.s.needing_attention() == [PAY]
    assert h.s.pending_timers() == []
    assert dispatches_of_the_write(h) == 1
    assert rejected(h, RedriveActivity(PAY)) == (
        "activity 'run#1/pay' of workflow 'wf-1' is not dead-lettered, it is attention "
        "(use resolve); redrive of activity 'run#1/pay' refused"
    )


def test_permanent_or_unusable_query_answers_need_attention_at_once() -> None:
    h = Harness()
    h.start("queried")
    h.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "after send"))
    events = h.send(FailActivity(QUERY, 1, "permanent", "NotSupported", "no lookup"))
    assert events[-1] == WorkflowNeedsAttention(
        PAY,
        "status query 'charge_status' of activity 'run#1/pay' failed permanently: "
        "NotSupported: no lookup; the outcome of attempt 1 is unknown",
    )
    h2 = Harness()
    h2.start("queried")
    h2.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "after send"))
    events = h2.send(CompleteActivity(QUERY, 1, '{"maybe": 1}'))
    assert events[-1] == WorkflowNeedsAttention(
        PAY,
        "status query 'charge_status' of activity 'run#1/pay' answered neither found nor not "
        'found (expected {"found": true, "result": ...} or {"found": false}); the outcome of '
        "attempt 1 is unknown",
    )
    assert h2.s.status == "needs_attention"


def test_resolution_found_completes_the_step() -> None:
    h = Harness()
    exhaust_the_query(h)
    assert rejected(h, ResolveActivity(PAY, "found", "{nope", "x")).startswith(
        "result of activity 'run#1/pay' is not valid JSON: "
    )
    resolve = h.env(ResolveActivity(PAY, "found", '{"receipt": "m"}', "seen in ledger"), None, None)
    assert h.send_env(resolve) == [
        ActivityResolved(PAY, "found", "seen in ledger"),
        ActivityCompleted(PAY, 1, '{"receipt": "m"}'),
        WorkflowCompleted('{"receipt":"m"}'),
    ]
    assert h.send_env(resolve) == []  # redelivered
    assert rejected(h, ResolveActivity(PAY, "found", "{}", "again")) == (
        "workflow 'wf-1' is completed; resolution of activity 'run#1/pay' refused"
    )


def test_resolution_not_found_retries_now_with_the_same_key() -> None:
    h = Harness()
    exhaust_the_query(h)
    events = h.send(ResolveActivity(PAY, "not_found", "", "not in ledger"))
    assert events == [
        ActivityResolved(PAY, "not_found", "not in ledger"),
        scheduled(2),
        timeout("start_to_close", 2, h.t + 30_000),
    ]
    assert h.s.status == "running"
    assert h.send(CompleteActivity(PAY, 2, '{"receipt": 2}'))[-1] == WorkflowCompleted(
        '{"receipt":2}'
    )
    assert dispatches_of_the_write(h) == 2


def test_resolution_failed_takes_the_failure_path() -> None:
    h = Harness()
    exhaust_the_query(h)
    events = h.send(ResolveActivity(PAY, "failed", "", "bank says no"))
    assert events == [
        ActivityResolved(PAY, "failed", "bank says no"),
        WorkflowFailed(
            "step 'pay' (charge) failed: its outcome stayed unknown and an operator resolved "
            "it as failed: bank says no"
        ),
    ]
    h2 = Harness()
    exhaust_the_query(h2, "queried_repair")
    events = h2.send(ResolveActivity(PAY, "failed", "", "bank says no"))
    assert events[1:] == [
        StateEntered("repair", 1),
        ActivityScheduled(
            "repair#1/fix",
            "fix",
            "fix",
            '{"pay":{"error_type":"OutcomeUnknown","failure_class":"unknown",'
            '"message":"bank says no"}}',
            1,
            1,
            key("fix"),
        ),
    ]
    assert h2.s.status == "running"


def test_resolve_rejections() -> None:
    h = Harness()
    h.start("queried")
    assert rejected(h, ResolveActivity(PAY, "found", "{}", "")) == (
        "activity 'run#1/pay' of workflow 'wf-1' is not awaiting resolution, it is scheduled; "
        "resolution of activity 'run#1/pay' refused"
    )
    assert rejected(h, ResolveActivity("run#1/zz", "found", "{}", "")) == (
        "workflow 'wf-1' has no activity 'run#1/zz'; resolution of activity 'run#1/zz' refused"
    )
    assert rejected(h, ResolveActivity(PAY, "maybe", "{}", "")) == (
        "resolution of activity 'run#1/pay' must be one of found, not_found, failed; got 'maybe'"
    )
    assert rejected(Harness("wf-9"), ResolveActivity(PAY, "found", "{}", "")) == (
        "workflow 'wf-9' does not exist; resolution of activity 'run#1/pay' refused"
    )


def test_cancel_from_needs_attention_abandons_the_activity() -> None:
    h = Harness()
    exhaust_the_query(h)
    assert h.send(CancelWorkflow("operator")) == [WorkflowCancelled("operator")]
    assert h.s.status == "cancelled" and h.s.activities[PAY].status == "cancelled"
    assert h.send(CompleteActivity(PAY, 1, "{}")) == []


# ---------------------------------------------------------------------------
# Dead letters and redrive
# ---------------------------------------------------------------------------


def test_dead_letter_after_max_attempts_then_redrive_completes() -> None:
    h = Harness()
    h.start("parked")
    h.send(FailActivity(PAY, 1, "transient", "HTTP503", "down"))
    h.fire(f"{PAY}/retry/1")
    assert rejected(h, RedriveActivity(PAY)) == (
        "activity 'run#1/pay' of workflow 'wf-1' is not dead-lettered, it is scheduled; "
        "redrive of activity 'run#1/pay' refused"
    )
    events = h.send(FailActivity(PAY, 2, "transient", "HTTP503", "down"))
    assert events == [
        ActivityFailed(PAY, 2, "transient", "HTTP503", "down"),
        ActivityDeadLettered(PAY, 2, "HTTP503", "down"),
    ]
    assert h.s.status == "needs_attention" and h.s.pending_timers() == []
    assert h.send(FireTimer(f"{PAY}/retry/1")) == []
    assert rejected(h, ResolveActivity(PAY, "found", "{}", "")) == (
        "activity 'run#1/pay' of workflow 'wf-1' is not awaiting resolution, it is "
        "dead_lettered (use redrive); resolution of activity 'run#1/pay' refused"
    )
    redrive = h.env(RedriveActivity(PAY), None, "redrive-1")
    assert h.send_env(redrive) == [ActivityRedriven(PAY), scheduled(3)]
    assert h.s.status == "running"
    assert h.send_env(redrive) == []  # redelivered
    # a fresh budget: two more attempts
    events = h.send(FailActivity(PAY, 3, "transient", "HTTP503", "down"))
    assert events[-1] == TimerScheduled(
        f"{PAY}/retry/3", h.t + retry_delay_ms(TWICE, "wf-1", PAY, 3), f"retry:{PAY}"
    )
    h.fire(f"{PAY}/retry/3")
    events = h.send(CompleteActivity(PAY, 4, '{"paid": 1}'))
    assert events == [ActivityCompleted(PAY, 4, '{"paid": 1}'), WorkflowCompleted('{"paid":1}')]
    assert {
        e.payload.idempotency_key for e in h.history if isinstance(e.payload, ActivityScheduled)
    } == {key()}
    assert rejected(h, RedriveActivity(PAY)) == (
        "workflow 'wf-1' is completed; redrive of activity 'run#1/pay' refused"
    )
    assert rejected(h, RedriveActivity("x")) == (
        "workflow 'wf-1' is completed; redrive of activity 'x' refused"
    )


def test_redrive_of_an_unknown_activity_is_rejected() -> None:
    h = Harness()
    h.start("parked")
    assert rejected(h, RedriveActivity("run#1/zz")) == (
        "workflow 'wf-1' has no activity 'run#1/zz'; redrive of activity 'run#1/zz' refused"
    )


def test_exhausted_timeouts_dead_letter_too() -> None:
    h = Harness()
    h.start("closing")
    for _ in range(2):
        h.fire(f"{PAY}/timeout/start_to_close/")
        h.fire(f"{PAY}/retry/")
    events = h.fire(f"{PAY}/timeout/start_to_close/3")
    assert events[1:] == [
        ActivityTimedOut(PAY, 3, "start_to_close"),
        ActivityDeadLettered(PAY, 3, "StartToCloseTimeout", "start_to_close timeout expired"),
    ]
    # late reports of dead-lettered attempts are dropped
    assert h.send(CompleteActivity(PAY, 2, "{}")) == []
    assert h.send(CompleteActivity(PAY, 3, "{}")) == []
    assert h.s.status == "needs_attention"


# ---------------------------------------------------------------------------
# Snapshots
# ---------------------------------------------------------------------------


def test_snapshot_round_trips_every_new_field() -> None:
    h = Harness()
    h.start("both")
    ship = "run#1/ship"
    h.send(FailActivity(ship, 1, "transient", "HTTP503", "down"))
    h.send(RedriveActivity(ship), mid="redrive-ship")
    h.send(FailActivity(ship, 2, "transient", "HTTP503", "down"))  # dead-lettered again
    h.send(HeartbeatActivity(PAY, 1, "{}"), mid="hb-1")
    h.fire(f"{PAY}/timeout/heartbeat/1/1")  # outcome unknown: querying
    s = h.s
    pay, query, shipped = s.activities[PAY], s.activities[QUERY], s.activities[ship]
    assert s.status == "needs_attention"
    assert (pay.status, pay.timed_out, pay.first_dispatch_at) == ("querying", (1,), T0 + 5)
    assert (query.parent, query.status) == (PAY, "scheduled")
    assert (shipped.status, shipped.budget_base) == ("dead_lettered", 1)
    assert "redrive-ship" in s.seen_commands
    # a running attempt with heartbeats and an armed timeout timer
    h.send(HeartbeatActivity(QUERY, 1, "{}"), mid="hb-q")
    query = h.s.activities[QUERY]
    assert (query.heartbeat_count, query.last_heartbeat, query.started) == (1, "hb-q", True)
    restored = WorkflowState.from_json(h.s.to_json())
    assert restored == h.s and restored.to_json() == h.s.to_json()
    h2 = Harness()
    h2.start("timed")
    h2.send(HeartbeatActivity(PAY, 1, "{}"), mid="hb-1")
    restored = WorkflowState.from_json(h2.s.to_json())
    assert restored == h2.s
    assert (restored.activities[PAY].heartbeat_count, restored.activities[PAY].last_heartbeat) == (
        1,
        "hb-1",
    )
    hb_timer = f"{PAY}/timeout/heartbeat/1/1"
    cmd = h2.env(FireTimer(hb_timer), h2.s.timers[hb_timer].fire_at, None)
    assert DECIDER.decide(restored, cmd) == DECIDER.decide(h2.s, cmd)
    # snapshots written before these fields existed still load
    old = json.loads(h2.s.to_json())
    for act in old["activities"]:
        for name in ("parent", "first_dispatch_at", "budget_base", "timed_out"):
            del act[name]
        # before coalescing, a snapshot kept every heartbeat's command id
        act["heartbeats"] = ["hb-0", "hb-1"] if act.pop("heartbeat_count") else []
        del act["last_heartbeat"]
    legacy = WorkflowState.from_dict(old)
    assert (legacy.activities[PAY].heartbeat_count, legacy.activities[PAY].parent) == (2, None)
    assert legacy.activities[PAY].started
