"""A long-lived run's state stays bounded: a window of seen command ids, coalesced heartbeats."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel

from orchestrator.domain import (
    SEEN_COMMANDS_WINDOW,
    ActivityState,
    Decider,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    WorkflowState,
)
from orchestrator.domain.model.messages import (
    ActivityHeartbeat,
    CancelWorkflow,
    Envelope,
    HeartbeatActivity,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerScheduled,
)

T0 = 1_700_000_000_000


class Empty(BaseModel):
    pass


listener = WorkflowDefinition(
    "listener",
    1,
    Empty,
    [State("hold", wait=SignalWait("go"), transitions=[Transition("hold")])],
)
worker = WorkflowDefinition(
    "worker",
    1,
    Empty,
    [
        State(
            "run",
            steps=[Step("beat", "beat", heartbeat=9), Step("quiet", "quiet", schedule_to_start=5)],
            complete=lambda c: 1,
        )
    ],
)
DECIDER = Decider([listener, worker])


class Run:
    def __init__(self) -> None:
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []

    def send(self, payload: Any, mid: str, at: int = T0) -> list[Any]:
        env = Envelope(mid, "wf", "", 0, type(payload).__name__, at, payload)
        self.state, envs = DECIDER.handle(self.state, env, now_ms=at + 1)
        self.history.extend(envs)
        return [e.payload for e in envs]


def test_seen_commands_is_a_fifo_window_kept_in_snapshots() -> None:
    run = Run()
    run.send(StartWorkflow("listener", 1, "{}"), "start")
    extra = 5
    for i in range(SEEN_COMMANDS_WINDOW + extra):
        assert run.send(SignalWorkflow("go", "{}"), f"sig-{i}") == [
            SignalReceived("go", "{}"),
            StateEntered("hold", i + 2),
        ]
    s = run.state
    assert s is not None
    assert s.seen_commands == tuple(f"sig-{i}" for i in range(extra, SEEN_COMMANDS_WINDOW + extra))
    assert DECIDER.fold(run.history) == s
    restored = WorkflowState.from_json(s.to_json())
    assert restored == s and restored.seen_commands == s.seen_commands
    # a redelivery is recent: still in the window, it writes nothing
    assert run.send(SignalWorkflow("go", "{}"), f"sig-{SEEN_COMMANDS_WINDOW}") == []
    # past the window a signal is still a duplicate: a webhook re-sent days later, its
    # Redis marker gone, is never applied twice (issue 29, item 4)
    assert run.send(SignalWorkflow("go", "{}"), "sig-0") == []
    assert len(s.signal_commands) == SEEN_COMMANDS_WINDOW + extra
    assert restored.signal_commands == s.signal_commands
    run.send(CancelWorkflow("done"), "cancel")
    assert run.state is not None
    assert DECIDER.summarize(None, run.history) == run.state.summary()
    assert len(run.state.summary().seen_commands) == SEEN_COMMANDS_WINDOW


def test_signal_ids_are_remembered_across_continue_as_new_up_to_the_history_limit(
    monkeypatch: Any,
) -> None:
    looping = WorkflowDefinition(
        "looping",
        1,
        Empty,
        [State("hold", wait=SignalWait("go"), continue_as_new=lambda ctx: {})],
    )
    decider = Decider([looping])
    state, history = None, []
    for mid, payload in [("start", StartWorkflow("looping", 1, "{}"))] + [
        (f"hook-{i}", SignalWorkflow("go", "{}")) for i in range(4)
    ]:
        env = Envelope(mid, "wf", "", 0, type(payload).__name__, T0, payload)
        state, envs = decider.handle(state, env, now_ms=T0)
        history.extend(envs)
    assert state is not None and state.run_id != "start"  # four runs later
    assert list(state.signal_commands) == [f"hook-{i}" for i in range(4)]
    env = Envelope("hook-0", "wf", "", 0, "SignalWorkflow", T0, SignalWorkflow("go", "{}"))
    assert decider.handle(state, env, now_ms=T0)[1] == []  # the first run's webhook, again
    assert decider.fold(history) == state
    # bounded: past the limit the oldest id goes first
    monkeypatch.setattr("orchestrator.domain.model.state.SIGNAL_COMMANDS_LIMIT", 2)
    n = state.clone()
    n.remember_signal("hook-4")
    assert list(n.signal_commands) == ["hook-3", "hook-4"]
    assert list(state.signal_commands) == [f"hook-{i}" for i in range(4)]  # not shared


def test_heartbeats_are_coalesced_by_a_third_of_the_heartbeat_timeout() -> None:
    run = Run()
    run.send(StartWorkflow("worker", 1, "{}"), "start")
    beat = "run#1/beat"
    deadline = f"{beat}/timeout/heartbeat/1"
    assert run.send(HeartbeatActivity(beat, 1, '{"p": 0}'), "hb-0", T0 + 100) == [
        ActivityHeartbeat(beat, 1, '{"p": 0}'),
        TimerScheduled(f"{deadline}/1", T0 + 9_100, f"timeout:heartbeat:{beat}"),
    ]
    # within a third (3 s) of the last recorded heartbeat: nothing is written
    assert run.send(HeartbeatActivity(beat, 1, '{"p": 1}'), "hb-1", T0 + 1_100) == []
    assert run.send(HeartbeatActivity(beat, 1, '{"p": 2}'), "hb-2", T0 + 3_099) == []
    # a third later: recorded, and the deadline moves
    assert run.send(HeartbeatActivity(beat, 1, '{"p": 3}'), "hb-3", T0 + 3_100) == [
        ActivityHeartbeat(beat, 1, '{"p": 3}'),
        TimerScheduled(f"{deadline}/2", T0 + 12_100, f"timeout:heartbeat:{beat}"),
    ]
    assert run.send(HeartbeatActivity(beat, 1, '{"p": 3}'), "hb-3", T0 + 3_100) == []
    assert run.state is not None
    assert [t for t, _ in run.state.pending_timers()] == [
        "run#1/quiet/timeout/schedule_to_start/1",
        f"{deadline}/2",
    ]
    act = run.state.activities[beat]
    assert (act.heartbeat_count, act.last_heartbeat) == (2, "hb-3")
    assert DECIDER.fold(run.history) == run.state


def test_without_a_heartbeat_timeout_only_the_first_heartbeat_is_recorded() -> None:
    run = Run()
    run.send(StartWorkflow("worker", 1, "{}"), "start")
    quiet = "run#1/quiet"
    assert run.send(HeartbeatActivity(quiet, 1, "{}"), "q-0", T0 + 100) == [
        ActivityHeartbeat(quiet, 1, "{}")
    ]
    for i in range(1, 50):
        assert run.send(HeartbeatActivity(quiet, 1, "{}"), f"q-{i}", T0 + 100 + i * 60_000) == []
    assert run.state is not None and run.state.activities[quiet].started
    # started and entered, two dispatches, one schedule-to-start timer, one heartbeat
    assert len(run.history) == 2 + 2 + 1 + 1


def test_activity_state_keeps_no_heartbeat_ids() -> None:
    names = {f.name for f in dataclasses.fields(ActivityState)}
    assert "heartbeats" not in names
    assert {"heartbeat_count", "last_heartbeat"} <= names
