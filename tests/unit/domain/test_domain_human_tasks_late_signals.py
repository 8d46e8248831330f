"""Signals that come early, late, for a finished run or with the wrong correlation.

A signal is never applied to the wrong step: a correlated wait takes only its own
correlation, a signal for a wait that closed is recorded and refused as late, and one
that comes before its wait is held until that wait opens (docs/workflows.md).
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
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    WorkflowState,
)
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    SignalReceived,
    SignalRefused,
    SignalWaitOpened,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerScheduled,
    WorkflowCompleted,
)

T0 = 1_700_000_000_000


class Rounds(BaseModel):
    rounds: int


def _ref(ctx: Any) -> str:
    return str(ctx.results["submit"]["ref"])


callbacks = WorkflowDefinition(
    "callbacks",
    1,
    Rounds,
    [
        State("submit", steps=[Step("submit", "submit")], transitions=[Transition("await")]),
        State(
            "await",
            wait=SignalWait("callback", timeout=60, correlation=_ref),
            transitions=[
                Transition("submit", when=lambda ctx: ctx.visits["await"] < ctx.input.rounds),
                Transition("done"),
            ],
        ),
        State("done", complete=lambda ctx: {"callbacks": ctx.signals["callback"]}),
    ],
)


class Harness:
    def __init__(self) -> None:
        self.d = Decider([callbacks])
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0
        self.t = T0

    def send(self, payload: Any, mid: str | None = None) -> list[Any]:
        self.n += 1
        self.t += 1
        env: Envelope[Any] = Envelope(
            mid or f"cmd-{self.n}", "wf-1", "", 0, type(payload).__name__, self.t, payload
        )
        self.state, events = self.d.handle(self.state, env, now_ms=self.t)
        self.history.extend(events)
        return [e.payload for e in events]

    def complete_submit(self, ref: str) -> list[Any]:
        assert self.state is not None
        aid = f"submit#{self.state.visit}/submit"
        return self.send(CompleteActivity(aid, 1, json.dumps({"ref": ref})))

    def callback(self, corr: str | None, n: int = 0, mid: str | None = None) -> list[Any]:
        return self.send(SignalWorkflow("callback", json.dumps({"n": n}), corr), mid=mid)


def started(rounds: int = 2) -> Harness:
    h = Harness()
    h.send(StartWorkflow("callbacks", None, json.dumps({"rounds": rounds})), mid="run-1")
    return h


def test_a_matching_signal_satisfies_the_open_wait() -> None:
    h = started(rounds=1)
    events = h.complete_submit("R1")
    assert events[1:4] == [
        StateEntered("await", 1),
        SignalWaitOpened("callback", "R1"),
        TimerScheduled("await#1/timeout", h.t + 60_000, "timeout:callback"),
    ]
    assert h.callback("R1") == [
        SignalReceived("callback", '{"n": 0}', "R1"),
        StateEntered("done", 1),
        WorkflowCompleted('{"callbacks":[{"n":0}]}'),
    ]


def test_a_mismatching_signal_is_recorded_and_refused_and_the_wait_stays_open() -> None:
    h = started(rounds=1)
    h.complete_submit("R1")
    assert h.callback("R2") == [
        SignalRefused(
            "callback",
            "R2",
            "state 'await' waits for signal 'callback' with correlation 'R1', not 'R2'",
        )
    ]
    assert h.callback(None) == [
        SignalRefused(
            "callback",
            None,
            "signal 'callback' carries no correlation; its waits require one "
            "(the run is in state 'await')",
        )
    ]
    assert h.state is not None and h.state.status == "waiting" and h.state.signals == {}
    assert h.callback("R1")[-1] == WorkflowCompleted('{"callbacks":[{"n":0}]}')


def test_a_signal_for_a_wait_that_closed_is_refused_as_late_never_applied() -> None:
    h = started(rounds=2)
    h.complete_submit("R1")
    h.callback("R1", n=1)  # round 1 done: back to submit, then await#2 with R2
    h.complete_submit("R2")
    late = h.callback("R1", n=99)
    assert late == [
        SignalRefused(
            "callback",
            "R1",
            "late: the wait for signal 'callback' with correlation 'R1' has closed "
            "(the run is in state 'await')",
        )
    ]
    assert h.state is not None and h.state.wait is not None and not h.state.wait.satisfied
    assert h.callback("R2", n=2)[-1] == WorkflowCompleted('{"callbacks":[{"n":1},{"n":2}]}')


def test_a_signal_that_comes_before_its_wait_is_held_until_the_wait_opens() -> None:
    h = started(rounds=1)
    # the external system answers before the worker reported the submission
    assert h.callback("R1", n=7) == [SignalReceived("callback", '{"n": 7}', "R1")]
    assert h.state is not None and h.state.correlated_inbox == (("callback", "R1", '{"n": 7}'),)
    events = h.complete_submit("R1")
    assert events == [
        ActivityCompleted("submit#1/submit", 1, '{"ref": "R1"}'),
        StateEntered("await", 1),
        SignalWaitOpened("callback", "R1"),
        StateEntered("done", 1),
        WorkflowCompleted('{"callbacks":[{"n":7}]}'),
    ]


def test_a_held_signal_of_another_correlation_does_not_satisfy_the_wait() -> None:
    h = started(rounds=1)
    h.callback("R9")
    events = h.complete_submit("R1")
    assert events[-1] == TimerScheduled("await#1/timeout", h.t + 60_000, "timeout:callback")
    assert h.state is not None and h.state.status == "waiting"


def test_a_redelivered_refused_signal_writes_nothing() -> None:
    h = started(rounds=1)
    h.complete_submit("R1")
    assert h.callback("R2", mid="sig-1") != []
    assert h.callback("R2", mid="sig-1") == []


def test_a_signal_for_a_finished_run_is_refused_with_the_reason() -> None:
    h = started(rounds=1)
    h.complete_submit("R1")
    h.callback("R1")
    with pytest.raises(CommandRejected, match="workflow 'wf-1' is completed; signal 'callback'"):
        h.callback("R1")


def test_decide_and_fold_agree_on_correlated_signals() -> None:
    h = started(rounds=2)
    h.callback("R1", n=1)
    h.complete_submit("R1")
    h.callback("R1", n=5)  # late
    h.complete_submit("R2")
    h.callback("R3")  # mismatch
    folded = h.d.fold(h.history)
    assert folded is not None and h.state is not None
    assert folded.to_dict() == h.state.to_dict()
    assert WorkflowState.from_json(h.state.to_json()).to_dict() == h.state.to_dict()
    assert h.state.closed_correlations == (("callback", "R1"),)
    assert [type(e.payload) for e in h.history].count(SignalRefused) == 2
    assert isinstance(h.history[2].payload, ActivityScheduled)


def test_waits_of_one_signal_must_agree_on_a_correlation() -> None:
    with pytest.raises(DefinitionError, match="signal 'go' is waited for with and without"):
        WorkflowDefinition(
            "mixed",
            1,
            Rounds,
            [
                State("a", wait=SignalWait("go", correlation=_ref), transitions=[Transition("b")]),
                State("b", wait=SignalWait("go"), transitions=[Transition("c")]),
                State("c", complete=lambda ctx: {}),
            ],
        )


def test_an_uncorrelated_definition_keeps_its_digest() -> None:
    plain = SignalWait("go", timeout=5, on_timeout="c")
    d = WorkflowDefinition(
        "plain",
        1,
        Rounds,
        [State("a", wait=plain, transitions=[Transition("c")]), State("c", complete=_ref)],
    )
    wait_desc = d.describe()["states"][0]["wait"]
    assert wait_desc == {"signal": "go", "timeout": 5000, "on_timeout": "c"}
