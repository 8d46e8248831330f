"""The decider on exact event sequences, exact rejection messages and envelope fields."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import (
    CommandRejected,
    Decider,
    HistoryError,
    WorkflowState,
    idempotency_key,
    retry_delay_ms,
)
from orchestrator.domain.authoring.definitions import (
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
)
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    CancelWorkflow,
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    RedriveActivity,
    ResolveActivity,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
)
from orchestrator.examples import app

T0 = 1_700_000_000_000


class Empty(BaseModel):
    pass


FETCH_RETRY = RetryPolicy(max_attempts=3, initial_interval_ms=1000, backoff_coefficient=2.0)

flaky = WorkflowDefinition(
    "flaky",
    1,
    Empty,
    [
        State(
            "work",
            steps=[
                Step("fetch", "fetch", retry=FETCH_RETRY, on_exhausted="fail", on_unknown="retry"),
                Step("store", "store", after=["fetch"], input=lambda ctx: ctx.results["fetch"]),
            ],
            transitions=[Transition("done")],
            on_failure="repair",
        ),
        State(
            "repair",
            steps=[Step("fix", "fix", input=lambda ctx: sorted(ctx.failures))],
            transitions=[Transition("work", when=lambda ctx: ctx.visits["work"] < 2)],
            fail="gave up after one repair",
        ),
        State("done", complete=lambda ctx: {"stored": ctx.results["store"]}),
    ],
)

broken = WorkflowDefinition(
    "broken",
    1,
    Empty,
    [State("only", steps=[Step("s", "fetch", input=lambda ctx: ctx.results["nope"])], fail="x")],
)

signalled = WorkflowDefinition(
    "signalled",
    1,
    Empty,
    [
        State("wait", wait=SignalWait("go"), transitions=[Transition("end")]),
        State("end", complete=lambda ctx: {"got": ctx.signals["go"]}),
    ],
)

strict_timeout = WorkflowDefinition(
    "strict_timeout",
    1,
    Empty,
    [
        State("wait", wait=SignalWait("go", timeout=2), transitions=[Transition("end")]),
        State("end", complete=lambda ctx: {}),
    ],
)

paused = WorkflowDefinition(
    "paused",
    1,
    Empty,
    [
        State(
            "first", steps=[Step("a", "fetch")], wait=TimerWait(10), transitions=[Transition("z")]
        ),
        State("z", complete=lambda ctx: ctx.results["a"]),
    ],
)


@pytest.fixture
def decider() -> Decider:
    return Decider([*app.definitions.values(), flaky, broken, signalled, strict_timeout, paused])


class Harness:
    """Sends commands through ``Decider.handle`` and keeps state and history."""

    def __init__(self, decider: Decider, wid: str = "wf-1") -> None:
        self.d = decider
        self.wid = wid
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0
        self.t = T0

    def cmd(self, payload: Any, at: int | None = None, mid: str | None = None) -> Envelope[Any]:
        self.n += 1
        if at is not None:
            self.t = at
        return Envelope(
            message_id=mid or f"cmd-{self.n}",
            workflow_id=self.wid,
            run_id="",
            seq=0,
            type=type(payload).__name__,
            recorded_at=self.t,
            payload=payload,
            correlation_id="corr-1",
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )

    def send(self, payload: Any, at: int | None = None, mid: str | None = None) -> list[Any]:
        env = self.cmd(payload, at, mid)
        self.state, events = self.d.handle(self.state, env, now_ms=self.t + 5)
        self.history.extend(events)
        return [e.payload for e in events]

    def send_env(self, env: Envelope[Any]) -> list[Any]:
        self.state, events = self.d.handle(self.state, env, now_ms=self.t + 5)
        self.history.extend(events)
        return [e.payload for e in events]

    def start(self, name: str, inp: dict[str, Any], version: int | None = None) -> list[Any]:
        return self.send(StartWorkflow(name, version, json.dumps(inp)), mid="run-1")


def review_result(decision: str, documents: int) -> str:
    return json.dumps({"decision": decision, "documents": documents})


def key(activity_type: str, n: int) -> str:
    return idempotency_key("wf-1", activity_type, n)


# ---------------------------------------------------------------------------
# Starting
# ---------------------------------------------------------------------------


def test_start_emits_started_state_and_first_activity(decider: Decider) -> None:
    h = Harness(decider)
    events = h.start("document_review", {"document": "a contract"})
    assert events == [
        WorkflowStarted(
            "document_review", 1, app.get("document_review").digest, '{"document": "a contract"}'
        ),
        StateEntered("review", 1),
        ActivityScheduled(
            activity_id="review#1/review",
            activity_type="review_document",
            step="review",
            input_json='{"documents":["a contract"]}',
            logical_attempt=1,
            attempt=1,
            idempotency_key=key("review_document", 1),
        ),
    ]
    assert h.state is not None and h.state.status == "running"
    assert h.state.run_id == "run-1"


def test_envelopes_are_deterministic_and_carry_causation(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 1})
    envs = h.history
    assert [e.seq for e in envs] == [1, 2, 3]
    assert [e.message_id for e in envs] == ["run-1/1", "run-1/2", "run-1/3"]
    assert [e.type for e in envs] == ["WorkflowStarted", "StateEntered", "ActivityScheduled"]
    for e in envs:
        assert e.run_id == "run-1"
        assert e.workflow_id == "wf-1"
        assert e.causation_id == "run-1"
        assert e.correlation_id == "corr-1"
        assert e.traceparent == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        assert e.recorded_at == T0 + 5
    h.send(CompleteActivity("run#1/one", 1, '{"n": 2}'), mid="done-1")
    assert [(e.seq, e.message_id, e.causation_id) for e in h.history[3:]] == [
        (4, "run-1/4", "done-1"),
        (5, "run-1/5", "done-1"),
    ]


def test_correlation_defaults_to_workflow_id(decider: Decider) -> None:
    env = Envelope(
        "m1", "wf-9", "", 0, "StartWorkflow", T0, StartWorkflow("three_step", 1, '{"n":1}')
    )
    _, events = decider.handle(None, env, now_ms=T0)
    assert {e.correlation_id for e in events} == {"wf-9"}
    assert {e.traceparent for e in events} == {None}


def test_duplicate_start_writes_nothing(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 1})
    before = h.state
    assert h.send(StartWorkflow("three_step", 1, '{"n": 99}'), mid="other") == []
    assert h.state is before


@pytest.mark.parametrize(
    ("name", "version", "inp", "message"),
    [
        (
            "nope",
            None,
            "{}",
            "unknown workflow 'nope'; known workflows: broken, checks_batch, document_review, flaky, "
            "invoice_batch, invoice_posting, invoice_posting_patient, parallel_checks, paused, "
            "payment_approval, signalled, slow_step, strict_timeout, summaries_batch, three_step, "
            "timer_demo, timers_batch, travel_booking",
        ),
        (
            "three_step",
            7,
            '{"n": 1}',
            "unknown version 7 of workflow 'three_step'; known versions: 1",
        ),
        (
            "three_step",
            1,
            '{"m": 1}',
            "invalid input for workflow 'three_step' v1: field 'm': Extra inputs are not "
            "permitted; field 'n': Field required",
        ),
        (
            "three_step",
            None,
            '{"n": "x"}',
            "invalid input for workflow 'three_step' v1: field 'n': Input should be a valid "
            "integer, unable to parse string as an integer",
        ),
    ],
)
def test_start_rejections(
    decider: Decider, name: str, version: int | None, inp: str, message: str
) -> None:
    h = Harness(decider)
    with pytest.raises(CommandRejected) as exc:
        h.send(StartWorkflow(name, version, inp))
    assert str(exc.value) == message
    assert h.state is None


@pytest.mark.parametrize(
    ("payload", "what"),
    [
        (SignalWorkflow("documents_added", "{}"), "signal 'documents_added'"),
        (CancelWorkflow("no"), "cancel"),
        (CompleteActivity("a", 1, "{}"), "completion of activity 'a'"),
        (FailActivity("a", 1, "transient", "E", "m"), "failure of activity 'a'"),
        (FireTimer("t"), "timer 't'"),
        (HeartbeatActivity("a", 1, "{}"), "heartbeat of activity 'a'"),
        (ResolveActivity("a", "found", "{}", "r"), "resolution of activity 'a'"),
        (RedriveActivity("a"), "redrive of activity 'a'"),
    ],
)
def test_commands_to_missing_workflow_are_rejected(
    decider: Decider, payload: Any, what: str
) -> None:
    with pytest.raises(CommandRejected) as exc:
        Harness(decider).send(payload)
    assert str(exc.value) == f"workflow 'wf-1' does not exist; {what} refused"


# ---------------------------------------------------------------------------
# document_review: the loop
# ---------------------------------------------------------------------------


def test_document_review_loops_twice_then_approves(decider: Decider) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "id card"})
    events = h.send(CompleteActivity("review#1/review", 1, review_result("needs_documents", 1)))
    assert events == [
        ActivityCompleted("review#1/review", 1, review_result("needs_documents", 1)),
        StateEntered("needs_documents", 1),
        TimerScheduled("needs_documents#1/timeout", T0 + 7 * 86_400_000, "timeout:documents_added"),
    ]
    assert h.state is not None and h.state.status == "waiting"
    assert h.state.pending_timers() == [("needs_documents#1/timeout", T0 + 7 * 86_400_000)]

    events = h.send(SignalWorkflow("documents_added", '{"document": "payslip"}'), at=T0 + 1000)
    assert events == [
        SignalReceived("documents_added", '{"document": "payslip"}'),
        StateEntered("review", 2),
        ActivityScheduled(
            "review#2/review",
            "review_document",
            "review",
            '{"documents":["id card","payslip"]}',
            2,
            1,
            key("review_document", 2),
        ),
    ]
    assert h.state.status == "running" and h.state.pending_timers() == []

    h.send(CompleteActivity("review#2/review", 1, review_result("needs_documents", 2)))
    events = h.send(SignalWorkflow("documents_added", '{"document": "bank statement"}'))
    assert events[1:] == [
        StateEntered("review", 3),
        ActivityScheduled(
            "review#3/review",
            "review_document",
            "review",
            '{"documents":["id card","payslip","bank statement"]}',
            3,
            1,
            key("review_document", 3),
        ),
    ]
    events = h.send(CompleteActivity("review#3/review", 1, review_result("approved", 3)))
    assert events == [
        ActivityCompleted("review#3/review", 1, review_result("approved", 3)),
        StateEntered("approved", 1),
        WorkflowCompleted('{"decision":"approved","documents":3}'),
    ]
    assert h.state.status == "completed"
    assert h.state.is_terminal
    assert h.state.visits == {"review": 3, "needs_documents": 2, "approved": 1}
    assert decider.fold(h.history) == h.state


def test_example_handlers_drive_the_review_loop(decider: Decider) -> None:
    """The bundled reviewer: two added documents make three, so the run approves."""
    h = Harness(decider)
    h.start("document_review", {"document": "passport"})
    handler = app.handler("review_document")
    assert handler.input_model is not None
    for i in range(3):
        assert h.state is not None
        (act,) = [a for a in h.state.activities.values() if a.status == "scheduled"]
        result = handler.fn(handler.input_model.model_validate_json(act.input_json))
        h.send(CompleteActivity(act.activity_id, act.attempt, result.model_dump_json()))
        if i < 2:
            h.send(SignalWorkflow("documents_added", json.dumps({"document": f"extra {i}"})))
    assert h.state is not None and h.state.status == "completed"
    assert h.state.output_json == '{"decision":"approved","documents":3}'


def test_fraud_is_rejected(decider: Decider) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "obvious FRAUD"})
    handler = app.handler("review_document")
    assert handler.input_model is not None
    result = handler.fn(handler.input_model.model_validate_json('{"documents":["obvious FRAUD"]}'))
    events = h.send(CompleteActivity("review#1/review", 1, result.model_dump_json()))
    assert events[-1] == WorkflowCompleted('{"decision":"rejected","documents":1}')


def test_signal_before_the_wait_is_kept_and_consumed_later(decider: Decider) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "a"})
    events = h.send(SignalWorkflow("documents_added", '{"document": "early"}'))
    assert events == [SignalReceived("documents_added", '{"document": "early"}')]
    assert h.state is not None and h.state.inbox == (("documents_added", '{"document": "early"}'),)
    events = h.send(CompleteActivity("review#1/review", 1, review_result("needs_documents", 1)))
    assert events == [
        ActivityCompleted("review#1/review", 1, review_result("needs_documents", 1)),
        StateEntered("needs_documents", 1),
        StateEntered("review", 2),
        ActivityScheduled(
            "review#2/review",
            "review_document",
            "review",
            '{"documents":["a","early"]}',
            2,
            1,
            key("review_document", 2),
        ),
    ]
    assert h.state.inbox == ()


def test_signal_wait_timeout_goes_to_on_timeout(decider: Decider) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "a"})
    h.send(CompleteActivity("review#1/review", 1, review_result("needs_documents", 1)))
    events = h.send(FireTimer("needs_documents#1/timeout"), at=T0 + 7 * 86_400_000)
    assert events == [
        TimerFired("needs_documents#1/timeout"),
        StateEntered("rejected", 1),
        WorkflowCompleted('{"decision":"rejected","documents":1}'),
    ]
    # the signal after the end is refused with a clear reason
    with pytest.raises(CommandRejected) as exc:
        h.send(SignalWorkflow("documents_added", "{}"))
    assert str(exc.value) == "workflow 'wf-1' is completed; signal 'documents_added' refused"
    with pytest.raises(CommandRejected) as exc:
        h.send(CancelWorkflow("too late"))
    assert str(exc.value) == "workflow 'wf-1' is completed; cancel refused"


def test_timeout_without_target_fails_and_signal_cancels_timeout(decider: Decider) -> None:
    h = Harness(decider)
    h.start("strict_timeout", {})
    assert h.state is not None and h.state.pending_timers() == [("wait#1/timeout", T0 + 2000)]
    events = h.send(FireTimer("wait#1/timeout"), at=T0 + 2000)
    assert events == [
        TimerFired("wait#1/timeout"),
        WorkflowFailed("state 'wait': timed out waiting for signal 'go'"),
    ]
    h2 = Harness(decider, "wf-2")
    h2.start("strict_timeout", {})
    h2.send(SignalWorkflow("go", "1"))
    assert h2.state is not None and h2.state.status == "completed"
    assert h2.send(FireTimer("wait#1/timeout")) == []  # cancelled by the signal


def test_signal_wait_without_timeout_and_ctx_signals(decider: Decider) -> None:
    h = Harness(decider)
    events = h.start("signalled", {})
    assert events[-1] == StateEntered("wait", 1)
    assert h.state is not None and h.state.status == "waiting"
    assert h.state.pending_timers() == []
    events = h.send(SignalWorkflow("go", '{"x": 1}'))
    assert events[-1] == WorkflowCompleted('{"got":[{"x":1}]}')


def test_unknown_signal_and_bad_payload_are_rejected(decider: Decider) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "a"})
    with pytest.raises(CommandRejected) as exc:
        h.send(SignalWorkflow("documents_addd", "{}"))
    assert str(exc.value) == (
        "workflow 'wf-1' (document_review v1) does not wait for signal 'documents_addd'; "
        "known signals: documents_added"
    )
    with pytest.raises(CommandRejected) as exc:
        h.send(SignalWorkflow("documents_added", "{nope"))
    assert str(exc.value).startswith("payload of signal 'documents_added' is not valid JSON: ")


def test_redelivered_signal_and_cancel_write_nothing(decider: Decider) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "a"})
    sig = h.cmd(SignalWorkflow("documents_added", '{"document": "b"}'))
    assert len(h.send_env(sig)) == 1
    assert h.send_env(sig) == []
    cancel = h.cmd(CancelWorkflow("operator"))
    assert h.send_env(cancel) == [WorkflowCancelled("operator")]
    assert h.send_env(cancel) == []
    assert h.send_env(sig) == []


# ---------------------------------------------------------------------------
# Parallel fan-out and join; sequential steps; timers
# ---------------------------------------------------------------------------


def test_parallel_checks_fan_out_and_join(decider: Decider) -> None:
    h = Harness(decider)
    events = h.start("parallel_checks", {"n": 3})
    assert events[2:] == [
        ActivityScheduled(
            "run#1/check_a", "check_a", "check_a", '{"n":3}', 1, 1, key("check_a", 1)
        ),
        ActivityScheduled(
            "run#1/check_b", "check_b", "check_b", '{"n":3}', 1, 1, key("check_b", 1)
        ),
        ActivityScheduled(
            "run#1/check_c", "check_c", "check_c", '{"n":3}', 1, 1, key("check_c", 1)
        ),
    ]
    assert h.send(CompleteActivity("run#1/check_b", 1, '{"value": 6}')) == [
        ActivityCompleted("run#1/check_b", 1, '{"value": 6}')
    ]
    assert len(h.send(CompleteActivity("run#1/check_c", 1, '{"value": 9}'))) == 1
    events = h.send(CompleteActivity("run#1/check_a", 1, '{"value": 4}'))
    assert events == [
        ActivityCompleted("run#1/check_a", 1, '{"value": 4}'),
        ActivityScheduled(
            "run#1/combine",
            "combine_checks",
            "combine",
            '{"a":4,"b":6,"c":9}',
            1,
            1,
            key("combine_checks", 1),
        ),
    ]
    events = h.send(CompleteActivity("run#1/combine", 1, '{"value": 19}'))
    assert events[-1] == WorkflowCompleted('{"result":19}')


def test_three_step_runs_sequentially(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 2})
    for step, result in (("one", '{"n": 3}'), ("two", '{"n": 6}'), ("three", '{"n": 36}')):
        events = h.send(CompleteActivity(f"run#1/{step}", 1, result))
    assert events == [
        ActivityCompleted("run#1/three", 1, '{"n": 36}'),
        WorkflowCompleted('{"n":36}'),
    ]
    scheduled = [e.payload for e in h.history if isinstance(e.payload, ActivityScheduled)]
    assert [(a.step, a.input_json) for a in scheduled] == [
        ("one", '{"n":2}'),
        ("two", '{"n":3}'),
        ("three", '{"n":6}'),
    ]


def test_timer_demo_waits_durably(decider: Decider) -> None:
    h = Harness(decider)
    events = h.start("timer_demo", {"seconds": 1.5})
    assert events[1:] == [
        StateEntered("sleep", 1),
        TimerScheduled("sleep#1/wait", T0 + 1500, "wait"),
    ]
    assert h.state is not None and h.state.status == "waiting"
    assert h.state.pending_timers() == [("sleep#1/wait", T0 + 1500)]
    events = h.send(FireTimer("sleep#1/wait"), at=T0 + 1600)
    assert events == [TimerFired("sleep#1/wait"), WorkflowCompleted('{"waited_seconds":1.5}')]
    assert h.send(FireTimer("sleep#1/wait")) == []


def test_timer_wait_after_steps(decider: Decider) -> None:
    h = Harness(decider)
    h.start("paused", {})
    events = h.send(CompleteActivity("first#1/a", 1, '{"k": 1}'), at=T0 + 50)
    assert events == [
        ActivityCompleted("first#1/a", 1, '{"k": 1}'),
        TimerScheduled("first#1/wait", T0 + 50 + 10_000, "wait"),
    ]
    events = h.send(FireTimer("first#1/wait"), at=T0 + 50 + 10_000)
    assert events == [
        TimerFired("first#1/wait"),
        StateEntered("z", 1),
        WorkflowCompleted('{"k":1}'),
    ]


# ---------------------------------------------------------------------------
# Duplicates and stale reports
# ---------------------------------------------------------------------------


def test_duplicate_and_stale_reports_write_nothing(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 2})
    assert h.send(CompleteActivity("run#1/one", 2, '{"n": 3}')) == []  # stale attempt
    # an activity this run never scheduled (another run's): refused, recorded by the engine
    with pytest.raises(CommandRejected, match="has no activity 'run#9/one'; completion of"):
        h.send(CompleteActivity("run#9/one", 1, '{"n": 3}'))
    with pytest.raises(CommandRejected, match="has no activity 'nope'; failure of"):
        h.send(FailActivity("nope", 1, "permanent", "E", "m"))
    assert len(h.send(CompleteActivity("run#1/one", 1, '{"n": 3}'))) == 2
    assert h.send(CompleteActivity("run#1/one", 1, '{"n": 3}')) == []  # duplicate
    assert h.send(FailActivity("run#1/one", 1, "transient", "E", "m")) == []
    assert h.send(FireTimer("never-armed")) == []


def test_bad_reports_are_rejected(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 2})
    with pytest.raises(CommandRejected) as exc:
        h.send(CompleteActivity("run#1/one", 1, "not json"))
    assert str(exc.value).startswith("result of activity 'run#1/one' is not valid JSON: ")
    with pytest.raises(CommandRejected) as exc:
        h.send(FailActivity("run#1/one", 1, "flaky", "E", "m"))
    assert str(exc.value) == (
        "failure_class of activity 'run#1/one' must be one of transient, permanent, unknown, "
        "throttled; got 'flaky'"
    )


# ---------------------------------------------------------------------------
# Retries and failure paths
# ---------------------------------------------------------------------------


def test_transient_failure_retries_same_logical_attempt(decider: Decider) -> None:
    h = Harness(decider)
    h.start("flaky", {})
    delay1 = retry_delay_ms(FETCH_RETRY, "wf-1", "work#1/fetch", 1)
    assert 0 <= delay1 <= 1000
    events = h.send(FailActivity("work#1/fetch", 1, "transient", "Timeout", "read timed out"))
    assert events == [
        ActivityFailed("work#1/fetch", 1, "transient", "Timeout", "read timed out"),
        TimerScheduled("work#1/fetch/retry/1", T0 + delay1, "retry:work#1/fetch"),
    ]
    assert h.state is not None and h.state.activities["work#1/fetch"].status == "backoff"
    assert h.state.status == "running"
    assert h.send(CompleteActivity("work#1/fetch", 1, "{}")) == []  # late report of attempt 1
    events = h.send(FireTimer("work#1/fetch/retry/1"), at=T0 + delay1)
    assert events == [
        TimerFired("work#1/fetch/retry/1"),
        ActivityScheduled("work#1/fetch", "fetch", "fetch", "{}", 1, 2, key("fetch", 1)),
    ]
    delay2 = retry_delay_ms(FETCH_RETRY, "wf-1", "work#1/fetch", 2)
    assert 0 <= delay2 <= 2000
    events = h.send(FailActivity("work#1/fetch", 2, "unknown", "Timeout", "after write"))
    assert events[1] == TimerScheduled("work#1/fetch/retry/2", h.t + delay2, "retry:work#1/fetch")
    h.send(FireTimer("work#1/fetch/retry/2"), at=h.t + delay2)
    events = h.send(FailActivity("work#1/fetch", 3, "transient", "HTTP503", "unavailable"))
    assert events == [
        ActivityFailed("work#1/fetch", 3, "transient", "HTTP503", "unavailable"),
        StateEntered("repair", 1),
        ActivityScheduled(
            "repair#1/fix",
            "fix",
            "fix",
            '["fetch"]',
            1,
            1,
            key("fix", 1),
        ),
    ]


def test_jitter_is_deterministic_and_bounded() -> None:
    policy = RetryPolicy(max_attempts=10, initial_interval_ms=100, max_interval_ms=1000)
    values = [retry_delay_ms(policy, "wf", "a#1/s", n) for n in range(1, 10)]
    assert values == [retry_delay_ms(policy, "wf", "a#1/s", n) for n in range(1, 10)]
    for n, v in enumerate(values, start=1):
        assert 0 <= v <= min(1000, 100 * 2 ** (n - 1))
    assert retry_delay_ms(policy, "wf-a", "a#1/s", 5) != retry_delay_ms(policy, "wf-b", "a#1/s", 5)


def test_permanent_failure_without_on_failure_fails_the_workflow(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 1})
    events = h.send(FailActivity("run#1/one", 1, "permanent", "ValidationError", "n is odd"))
    assert events == [
        ActivityFailed("run#1/one", 1, "permanent", "ValidationError", "n is odd"),
        WorkflowFailed("step 'one' (add_one) failed permanently: ValidationError: n is odd"),
    ]
    assert h.state is not None and h.state.status == "failed"
    assert h.state.failure_reason == events[-1].reason


def test_exhausted_retries_fail_the_workflow_with_on_exhausted_fail() -> None:
    strict = WorkflowDefinition(
        "strict",
        1,
        Empty,
        [State("run", steps=[Step("one", "add_one", on_exhausted="fail")], complete=print)],
    )
    h = Harness(Decider([strict]))
    h.start("strict", {})
    for attempt in (1, 2):
        h.send(FailActivity("run#1/one", attempt, "transient", "Timeout", "slow"))
        assert h.state is not None
        ((timer_id, fire_at),) = h.state.pending_timers()
        h.send(FireTimer(timer_id), at=fire_at)
    events = h.send(FailActivity("run#1/one", 3, "transient", "Timeout", "slow"))
    assert events == [
        ActivityFailed("run#1/one", 3, "transient", "Timeout", "slow"),
        WorkflowFailed("step 'one' (add_one) failed after 3 attempts: Timeout: slow"),
    ]


def test_exhausted_retries_dead_letter_by_default(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 1})
    for attempt in (1, 2):
        h.send(FailActivity("run#1/one", attempt, "transient", "Timeout", "slow"))
        assert h.state is not None
        ((timer_id, fire_at),) = h.state.pending_timers()
        h.send(FireTimer(timer_id), at=fire_at)
    events = h.send(FailActivity("run#1/one", 3, "transient", "Timeout", "slow"))
    assert events == [
        ActivityFailed("run#1/one", 3, "transient", "Timeout", "slow"),
        ActivityDeadLettered("run#1/one", 3, "Timeout", "slow"),
    ]
    assert h.state is not None and h.state.status == "needs_attention"
    assert h.state.needing_attention() == ["run#1/one"]


def test_on_failure_transition_loops_then_gives_up(decider: Decider) -> None:
    h = Harness(decider)
    h.start("flaky", {})
    h.send(CompleteActivity("work#1/fetch", 1, '{"v": 1}'))
    assert h.state is not None
    assert h.state.activities["work#1/store"].input_json == '{"v":1}'
    events = h.send(FailActivity("work#1/store", 1, "permanent", "Forbidden", "no write access"))
    assert events == [
        ActivityFailed("work#1/store", 1, "permanent", "Forbidden", "no write access"),
        StateEntered("repair", 1),
        ActivityScheduled(
            "repair#1/fix",
            "fix",
            "fix",
            '["store"]',
            1,
            1,
            key("fix", 1),
        ),
    ]
    events = h.send(CompleteActivity("repair#1/fix", 1, "{}"))
    assert events == [
        ActivityCompleted("repair#1/fix", 1, "{}"),
        StateEntered("work", 2),
        ActivityScheduled("work#2/fetch", "fetch", "fetch", "{}", 2, 1, key("fetch", 2)),
    ]
    h.send(CompleteActivity("work#2/fetch", 1, '{"v": 2}'))
    h.send(FailActivity("work#2/store", 1, "permanent", "Forbidden", "still no"))
    events = h.send(CompleteActivity("repair#2/fix", 1, "{}"))
    assert events == [
        ActivityCompleted("repair#2/fix", 1, "{}"),
        WorkflowFailed("gave up after one repair"),
    ]


def test_user_code_error_fails_the_workflow_with_reason(decider: Decider) -> None:
    h = Harness(decider)
    events = h.start("broken", {})
    assert events[-1] == WorkflowFailed("state 'only': input of step 's' raised KeyError: 'nope'")


def test_leaving_a_state_abandons_siblings_and_their_retry_timers() -> None:
    twins = WorkflowDefinition(
        "twins",
        1,
        Empty,
        [
            State("s", steps=[Step("a", "fetch"), Step("b", "store")], on_failure="r", fail="x"),
            State(
                "r", steps=[Step("fix", "fix", input=lambda ctx: sorted(ctx.failures))], fail="y"
            ),
        ],
    )
    h = Harness(Decider([twins]))
    h.start("twins", {})
    h.send(FailActivity("s#1/a", 1, "transient", "Timeout", "slow"))
    assert h.state is not None and [t for t, _ in h.state.pending_timers()] == ["s#1/a/retry/1"]
    events = h.send(FailActivity("s#1/b", 1, "permanent", "Forbidden", "no"))
    assert events == [
        ActivityFailed("s#1/b", 1, "permanent", "Forbidden", "no"),
        StateEntered("r", 1),
        ActivityScheduled("r#1/fix", "fix", "fix", '["b"]', 1, 1, key("fix", 1)),
    ]
    assert h.state.pending_timers() == []
    assert h.state.activities["s#1/a"].status == "cancelled"
    assert h.send(FireTimer("s#1/a/retry/1")) == []


# ---------------------------------------------------------------------------
# Cancellation
# ---------------------------------------------------------------------------


def test_cancel_drops_timers_and_ignores_late_reports(decider: Decider) -> None:
    h = Harness(decider)
    h.start("flaky", {})
    h.send(FailActivity("work#1/fetch", 1, "transient", "Timeout", "slow"))
    assert h.state is not None and len(h.state.pending_timers()) == 1
    assert h.send(CancelWorkflow("operator asked")) == [WorkflowCancelled("operator asked")]
    assert h.state.status == "cancelled"
    assert h.state.pending_timers() == []
    assert h.state.activities["work#1/fetch"].status == "cancelled"
    assert h.send(FireTimer("work#1/fetch/retry/1")) == []
    assert h.send(CompleteActivity("work#1/fetch", 1, "{}")) == []


# ---------------------------------------------------------------------------
# Purity, evolve and snapshots
# ---------------------------------------------------------------------------


def test_decide_does_not_touch_its_input_and_reads_only_the_command_clock(
    decider: Decider,
) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "a"})
    assert h.state is not None
    snapshot = h.state.to_json()
    cmd = h.cmd(CompleteActivity("review#1/review", 1, review_result("needs_documents", 1)))
    first = decider.decide(h.state, cmd)
    second = decider.decide(h.state, cmd)
    assert first == second
    assert h.state.to_json() == snapshot
    assert first[-1] == TimerScheduled(
        "needs_documents#1/timeout", cmd.recorded_at + 7 * 86_400_000, "timeout:documents_added"
    )
    _, envs = decider.handle(h.state, cmd, now_ms=cmd.recorded_at + 12345)
    assert [e.payload for e in envs] == first  # the envelope time is not a decision input
    assert h.state.to_json() == snapshot


def test_evolve_skips_applied_events_and_refuses_gaps(decider: Decider) -> None:
    h = Harness(decider)
    h.start("three_step", {"n": 1})
    h.send(CompleteActivity("run#1/one", 1, '{"n": 2}'))
    state = decider.fold(h.history[:3])
    assert decider.evolve(state, h.history[1]) is state
    with pytest.raises(HistoryError, match="gap"):
        decider.evolve(state, h.history[4])
    with pytest.raises(HistoryError, match="not WorkflowStarted"):
        decider.evolve(None, h.history[1])
    assert decider.fold(h.history[3:], state) == h.state


def test_snapshot_round_trip(decider: Decider) -> None:
    h = Harness(decider)
    h.start("document_review", {"document": "a"})
    h.send(SignalWorkflow("documents_added", '{"document": "b"}'))
    h.send(CompleteActivity("review#1/review", 1, review_result("needs_documents", 1)))
    h.send(FailActivity("review#2/review", 1, "transient", "E", "m"))
    assert h.state is not None
    restored = WorkflowState.from_json(h.state.to_json())
    assert restored == h.state
    assert restored.to_json() == h.state.to_json()
    assert restored.pending_timers() == h.state.pending_timers()
    # the restored state decides exactly like the original
    timer_id, fire_at = h.state.pending_timers()[0]
    cmd = h.cmd(FireTimer(timer_id), at=fire_at)
    assert decider.decide(restored, cmd) == decider.decide(h.state, cmd)
