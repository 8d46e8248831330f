"""Limits in the decider (docs/limits.md): bad input is refused, never written.

Every JSON value a command carries is parsed within the size, depth and integer limits;
every duration is bounded (constants when a definition is built, computed ones when
the decider computes them: the run fails); a payload the decider computes that is too
large, or a history that is too long, stops the run in ``needs_attention``; whatever a
definition function raises fails the run and never escapes ``decide``.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import (
    CommandRejected,
    Decider,
    DefinitionError,
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
    WorkflowState,
)
from orchestrator.domain.lifecycle import command_handlers as decide_module
from orchestrator.domain.model.limits import (
    MAX_DURATION_MS,
    MAX_PAYLOAD_BYTES,
    MAX_REASON_CHARS,
    loads_bounded,
)
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CancelWorkflow,
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    ResolveActivity,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNeedsAttention,
    WorkflowStarted,
)
from orchestrator.examples import app

T0 = 1_700_000_000_000
DAYS = MAX_DURATION_MS // 86_400_000


class Empty(BaseModel):
    pass


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


class Run:
    def __init__(self, decider: Decider, wid: str = "wf") -> None:
        self.decider, self.wid = decider, wid
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0

    def send(self, payload: Any, at: int = T0) -> list[Any]:
        self.n += 1
        env = Envelope(f"m{self.n}", self.wid, "", 0, type(payload).__name__, at, payload)
        self.state, envs = self.decider.handle(self.state, env, now_ms=at)
        self.history.extend(envs)
        assert self.decider.fold(self.history) == self.state
        return [e.payload for e in envs]


def examples() -> Run:
    return Run(Decider(app.definitions.values()))


# -- durations ---------------------------------------------------------------------------


def test_a_computed_timer_past_the_limit_fails_the_run_with_one_line() -> None:
    run = examples()
    events = run.send(StartWorkflow("timer_demo", 1, '{"seconds": 1e300}'))
    reason = f"state 'sleep': timer duration: a duration must be at most {DAYS:,} days, got 1e+300 seconds"
    assert events[2:] == [WorkflowFailed(reason)]
    assert run.state is not None and run.state.status == "failed"


@pytest.mark.parametrize(
    "build",
    [
        lambda: State("s", wait=TimerWait(MAX_DURATION_MS / 1000 + 1), complete=lambda c: 1),
        lambda: State(
            "s", wait=SignalWait("go", timeout=timedelta(days=DAYS + 1)), complete=lambda c: 1
        ),
        lambda: State("s", steps=[Step("a", "a", start_to_close=1e12)], complete=lambda c: 1),
        lambda: State("s", steps=[Step("a", "a", heartbeat=float("inf"))], complete=lambda c: 1),
    ],
)
def test_constant_durations_past_the_limit_are_definition_errors(build: Any) -> None:
    with pytest.raises(DefinitionError, match=f"at most {DAYS:,} days"):
        WorkflowDefinition("long", 1, Empty, [build()])


def test_retry_intervals_are_bounded_and_backoff_never_overflows() -> None:
    with pytest.raises(DefinitionError, match="RetryPolicy intervals must be at most"):
        RetryPolicy(max_interval_ms=MAX_DURATION_MS + 1)
    policy = RetryPolicy(max_attempts=10_000, backoff_coefficient=10.0, max_interval_ms=5_000)
    assert policy.backoff_cap_ms(5_000) == 5_000  # 10.0 ** 4999 overflows a float


def test_a_command_from_an_absurd_clock_is_refused() -> None:
    run = examples()
    with pytest.raises(CommandRejected, match="is not a valid time"):
        run.send(StartWorkflow("timer_demo", 1, '{"seconds": 1}'), at=2**63 - 1)


# -- JSON a command carries ------------------------------------------------------------------


def test_a_start_input_past_the_limits_is_refused() -> None:
    run = examples()
    big = json.dumps({"document": "x" * MAX_PAYLOAD_BYTES})
    with pytest.raises(CommandRejected) as exc:
        run.send(StartWorkflow("document_review", 1, big))
    assert str(exc.value) == (
        f"input of workflow 'document_review' v1 is {len(big):,} bytes; the limit is "
        f"{MAX_PAYLOAD_BYTES:,} bytes (store large documents elsewhere and pass a reference)"
    )
    with pytest.raises(CommandRejected, match="holds an integer of 4000 digits; the limit is 64"):
        run.send(StartWorkflow("timer_demo", 1, '{"seconds": ' + "9" * 4000 + "}"))
    with pytest.raises(CommandRejected, match="nests deeper than 64 levels"):
        run.send(StartWorkflow("timer_demo", 1, '{"seconds": 1, "x": ' + _nested(100) + "}"))
    assert run.state is None and run.history == []


def review_waiting_for_documents() -> Run:
    run = examples()
    run.send(StartWorkflow("document_review", 1, '{"document": "a"}'))
    run.send(
        CompleteActivity("review#1/review", 1, '{"decision": "needs_documents", "documents": 1}')
    )
    assert run.state is not None and run.state.status == "waiting"
    return run


def test_a_deep_or_huge_signal_payload_is_refused_and_writes_nothing() -> None:
    run = review_waiting_for_documents()
    seq = run.state.seq if run.state else 0
    with pytest.raises(CommandRejected) as exc:
        run.send(SignalWorkflow("documents_added", _nested(100_000)))
    assert str(exc.value) == (
        "payload of signal 'documents_added' nests deeper than 64 levels of arrays and objects"
    )
    with pytest.raises(CommandRejected, match="payload of signal 'documents_added' is 300,0"):
        run.send(SignalWorkflow("documents_added", json.dumps("y" * (300_000 - 2))))
    assert run.state is not None and run.state.seq == seq


def test_results_details_and_resolutions_are_checked_too() -> None:
    run = examples()
    run.send(StartWorkflow("document_review", 1, '{"document": "a"}'))
    with pytest.raises(
        CommandRejected, match="heartbeat details of activity 'review#1/review' nest"
    ):
        run.send(HeartbeatActivity("review#1/review", 1, _nested(65)))
    with pytest.raises(
        CommandRejected, match="result of activity 'review#1/review' holds an integer"
    ):
        run.send(CompleteActivity("review#1/review", 1, '{"documents": 1' + "0" * 70 + "}"))
    with pytest.raises(CommandRejected, match="result of activity 'review#1/review' is not valid"):
        run.send(CompleteActivity("review#1/review", 1, "{"))


# -- payloads the decider computes, and the history ----------------------------------------------


def test_an_activity_input_grown_past_the_limit_puts_the_run_in_needs_attention() -> None:
    run = review_waiting_for_documents()
    doc = "d" * (MAX_PAYLOAD_BYTES // 2)
    run.send(SignalWorkflow("documents_added", json.dumps({"document": doc})))
    run.send(
        CompleteActivity("review#2/review", 1, '{"decision": "needs_documents", "documents": 2}')
    )
    events = run.send(SignalWorkflow("documents_added", json.dumps({"document": doc})))
    size = len(json.dumps({"documents": ["a", doc, doc]}, separators=(",", ":")))
    reason = (
        f"state 'review': input of step 'review' is {size:,} bytes; the limit is "
        f"{MAX_PAYLOAD_BYTES:,} bytes (store large documents elsewhere and pass a reference)"
    )
    assert events[0] == SignalReceived("documents_added", json.dumps({"document": doc}))
    assert events[1:] == [StateEntered("review", 3), WorkflowNeedsAttention("", reason)]
    s = run.state
    assert s is not None and (s.status, s.attention_reason) == ("needs_attention", reason)
    assert WorkflowState.from_json(s.to_json()) == s
    # nothing moves but a cancel
    with pytest.raises(CommandRejected) as exc:
        run.send(SignalWorkflow("documents_added", "{}"))
    assert str(exc.value) == (
        f"workflow 'wf' needs attention ({reason}); signal 'documents_added' refused (cancel it)"
    )
    assert run.send(CancelWorkflow("too big")) == [WorkflowCancelled("too big")]


def test_a_history_past_the_limit_puts_the_run_in_needs_attention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decide_module, "MAX_HISTORY_EVENTS", 10)
    wide = WorkflowDefinition.dag(
        "wide", 1, Empty, [Step(f"s{i}", "work") for i in range(20)], output=lambda c: 1
    )
    run = Run(Decider([wide]))
    events = run.send(StartWorkflow("wide", 1, "{}"))
    assert [type(e) for e in events[:2]] == [WorkflowStarted, StateEntered]
    assert all(isinstance(e, ActivityScheduled) for e in events[2:10])
    reason = (
        "the history reached 10 events, the limit per run (a long-lived run should continue as new)"
    )
    assert events[10:] == [WorkflowNeedsAttention("", reason)]
    assert run.state is not None and run.state.status == "needs_attention"
    with pytest.raises(CommandRejected, match="needs attention"):
        run.send(CompleteActivity("run#1/s0", 1, "{}"))


# -- definition functions that raise ----------------------------------------------------------


def _recurse(ctx: Any) -> bool:
    return _recurse(ctx)


class Falsy:
    def __bool__(self) -> bool:
        raise OverflowError("no truth")


def _deep(ctx: Any) -> Any:
    value: Any = []
    for _ in range(sys.getrecursionlimit() * 2):
        value = [value]
    return value


odd = WorkflowDefinition(
    "odd",
    1,
    Empty,
    [
        State(
            "start",
            transitions=[
                Transition("a", when=lambda c: c.input_dict.get("go") == "a"),
                Transition("b", when=lambda c: c.input_dict.get("go") == "b"),
                Transition("c"),
            ],
        ),
        State("a", transitions=[Transition("end", when=_recurse)]),
        State("b", transitions=[Transition("end", when=lambda c: Falsy())]),
        State("c", steps=[Step("deep", "work", input=_deep)], transitions=[Transition("end")]),
        State("end", complete=lambda c: 1),
    ],
)


@pytest.mark.parametrize(
    ("go", "reason"),
    [
        (
            "a",
            "state 'a': transition to 'end' raised RecursionError: maximum recursion depth exceeded",
        ),
        ("b", "state 'b': transition to 'end': OverflowError('no truth')"),
        (
            "c",
            "state 'c': input of step 'deep' is not JSON: RecursionError('maximum recursion depth exceeded",
        ),
    ],
)
def test_whatever_a_definition_function_raises_fails_the_run(go: str, reason: str) -> None:
    run = Run(Decider([odd]))
    events = run.send(StartWorkflow("odd", 1, json.dumps({"go": go})))
    assert isinstance(events[-1], WorkflowFailed)
    assert events[-1].reason.startswith(reason)
    assert "\n" not in events[-1].reason


def test_recorded_reasons_and_messages_are_cut() -> None:
    run = examples()
    run.send(StartWorkflow("document_review", 1, '{"document": "a"}'))
    events = run.send(FailActivity("review#1/review", 1, "permanent", "E" * 5000, "m" * 5000))
    failed, end = events
    assert isinstance(failed, ActivityFailed) and isinstance(end, WorkflowFailed)
    assert len(failed.message) == len(failed.error_type) == MAX_REASON_CHARS
    assert failed.message.endswith("…") and len(end.reason) == MAX_REASON_CHARS


def test_a_found_resolution_result_is_checked() -> None:
    doubtful = WorkflowDefinition.dag(
        "doubtful",
        1,
        Empty,
        [Step("pay", "charge", start_to_close=1, status_query="charge_status")],
        output=lambda c: 1,
    )
    run = Run(Decider([doubtful]))
    run.send(StartWorkflow("doubtful", 1, "{}"))
    run.send(FireTimer("run#1/pay/timeout/start_to_close/1"), at=T0 + 1_000)
    run.send(CompleteActivity("run#1/pay/query/1", 1, '{"found": "perhaps"}'), at=T0 + 2_000)
    assert run.state is not None and run.state.needing_attention() == ["run#1/pay"]
    with pytest.raises(CommandRejected) as exc:
        run.send(ResolveActivity("run#1/pay", "found", _nested(100), "checked by hand"))
    assert str(exc.value) == (
        "result of activity 'run#1/pay' nests deeper than 64 levels of arrays and objects"
    )
    events = run.send(ResolveActivity("run#1/pay", "found", '{"ok": 1}', "checked by hand"))
    assert events[1] == ActivityCompleted("run#1/pay", 1, '{"ok": 1}')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e400", "input holds the number 1e400, which overflows a double"),
        ('{"a": [-1e999]}', "input holds the number -1e999, which overflows a double"),
        ("9" * 60 + ".0e300", f"input holds the number {'9' * 40}, which overflows a double"),
        ("NaN", "input holds NaN, which is not standard JSON (RFC 8259)"),
        ('{"x": Infinity}', "input holds Infinity, which is not standard JSON (RFC 8259)"),
        ('["\\ud800"]', "input holds a lone surrogate (U+D800), which is not valid Unicode"),
        ('"\ud800"', "input holds a lone surrogate (U+D800), which is not valid Unicode"),
        (b'"\xff"', "input is not valid UTF-8 (byte 1: invalid start byte)"),
    ],
)
def test_the_input_rule_refuses_what_standard_json_does_not_allow(text, message) -> None:
    with pytest.raises(ValueError) as exc:
        loads_bounded(text, "input")
    assert str(exc.value) == message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"NaN and Infinity are words"', "NaN and Infinity are words"),
        ('"\\ud83d\\ude00"', "\U0001f600"),  # a surrogate pair is one character
        ("1.5e308", 1.5e308),
        ("-0.0", -0.0),
        (b'{"caf\xc3\xa9": 1}', {"café": 1}),
    ],
)
def test_the_input_rule_keeps_every_standard_value(text, value) -> None:
    assert loads_bounded(text, "input") == value


def test_the_orchestrator_refuses_a_raw_start_holding_infinity() -> None:
    """A producer that skips the edges meets the same rule in the decider."""
    run = examples()
    with pytest.raises(CommandRejected) as exc:
        run.send(StartWorkflow("timer_demo", 1, '{"seconds": 1e400}'))
    assert str(exc.value).endswith("holds the number 1e400, which overflows a double")
    with pytest.raises(CommandRejected, match=r"holds NaN, which is not standard JSON"):
        run.send(StartWorkflow("timer_demo", 1, '{"seconds": NaN}'))
    assert run.state is None and run.history == []
