"""The continue budget (issue 44, item 6): at most MAX_CONTINUES_PER_WINDOW continues as new
within any CONTINUE_WINDOW_MS of recorded time; one more is held on a durable timer."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import (
    CommandRejected,
    Decider,
    SignalWait,
    State,
    WorkflowDefinition,
    WorkflowState,
)
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.lifecycle.run_continues import held_until
from orchestrator.domain.model.limits import CONTINUE_WINDOW_MS, MAX_CONTINUES_PER_WINDOW
from orchestrator.domain.model.messages import (
    CancelWorkflow,
    Envelope,
    FireTimer,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowContinuedAsNew,
)

T0 = 1_700_000_000_000
N = MAX_CONTINUES_PER_WINDOW
W = CONTINUE_WINDOW_MS


class Count(BaseModel):
    n: int = 0


#: Continues as new after every signal: the run's number is in its input.
every_signal = WorkflowDefinition(
    "every-signal",
    1,
    Count,
    [State("hold", wait=SignalWait("go"), continue_as_new=lambda ctx: {"n": ctx.input.n + 1})],
)
#: Continues as new at once, forever: a loop with nothing to slow it.
spin = WorkflowDefinition(
    "spin", 1, Count, [State("spin", continue_as_new=lambda ctx: {"n": ctx.input.n + 1})]
)


class Run:
    def __init__(self, definition: WorkflowDefinition) -> None:
        self.d = Decider([definition])
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.sent = 0
        self.send(StartWorkflow(definition.name, None, "{}"), T0)

    def send(self, payload: Any, at: int) -> list[Any]:
        self.sent += 1
        run = "" if self.state is None else self.state.run_id
        env: Envelope[Any] = Envelope(
            f"cmd-{self.sent}", "wf-1", run, 0, type(payload).__name__, at, payload
        )
        self.state, events = self.d.handle(self.state, env, now_ms=at)
        self.history.extend(events)
        return [e.payload for e in events]

    @property
    def s(self) -> WorkflowState:
        assert self.state is not None
        return self.state

    def continues(self) -> int:
        return sum(isinstance(e.payload, WorkflowContinuedAsNew) for e in self.history)


def test_the_continue_past_the_budget_is_held_on_a_timer_until_the_oldest_leaves_the_window() -> (
    None
):
    r = Run(every_signal)
    for i in range(N):  # the whole budget, one continue a millisecond
        r.send(SignalWorkflow("go", "{}"), T0 + i)
    assert r.continues() == N
    assert r.s.continue_times == tuple(T0 + i for i in range(N))
    base = r.s.run_base_seq

    held = r.send(SignalWorkflow("go", "{}"), T0 + N)
    assert held == [
        SignalReceived("go", "{}"),
        TimerScheduled(f"hold#1@{base}/continue", T0 + W, "continue"),
    ]
    assert r.s.input_json == f'{{"n":{N}}}' and r.s.status == "running"
    # a signal while held arms nothing again; it waits in the inbox for the next run
    assert r.send(SignalWorkflow("go", "{}"), T0 + N + 1) == [SignalReceived("go", "{}")]

    with pytest.raises(CommandRejected, match=r"ms before it is due"):
        r.send(FireTimer(f"hold#1@{base}/continue"), T0 + W - 1)
    fired = r.send(FireTimer(f"hold#1@{base}/continue"), T0 + W)
    new_base = base + 6  # its StateEntered, two signals, the timer, its fire, the continue
    assert fired[:3] == [
        TimerFired(f"hold#1@{base}/continue"),
        WorkflowContinuedAsNew(fired[1].new_run_id, f'{{"n":{N + 1}}}'),
        StateEntered("hold", 1),
    ]
    # the next run takes the held signal at once: the window is full again until T0 + 1 leaves
    assert fired[3:] == [TimerScheduled(f"hold#1@{new_base}/continue", T0 + 1 + W, "continue")]
    assert r.s.continue_times == (*(T0 + i for i in range(1, N)), T0 + W)
    assert r.s.inbox == ()
    assert check_history(r.history) == []


def test_a_loop_without_a_wait_runs_the_budget_per_window_and_no_more() -> None:
    r = Run(spin)
    assert r.continues() == N  # the start decision ran the whole budget, then held
    assert r.history[-1].payload == TimerScheduled(
        f"spin#1@{r.s.run_base_seq}/continue", T0 + W, "continue"
    )
    timer = r.history[-1].payload.timer_id
    r.send(FireTimer(timer), T0 + W)  # a minute on: the next hundred, then held again
    assert r.continues() == 2 * N
    assert r.history[-1].payload.fire_at == T0 + 2 * W
    assert r.s.input_json == f'{{"n":{2 * N}}}'


def test_continues_spread_over_the_window_are_never_held() -> None:
    r = Run(every_signal)
    step = W // N + 1  # just under N continues in any window
    for i in range(3 * N):
        r.send(SignalWorkflow("go", "{}"), T0 + i * step)
    assert r.continues() == 3 * N
    assert not any(isinstance(e.payload, TimerScheduled) for e in r.history)


def test_the_budget_survives_a_snapshot_and_a_fold() -> None:
    r = Run(every_signal)
    for i in range(N):
        r.send(SignalWorkflow("go", "{}"), T0 + i)
    restored = WorkflowState.from_json(r.s.to_json())
    assert restored.continue_times == r.s.continue_times
    folded = r.d.fold(r.history)
    assert folded is not None and folded.continue_times == r.s.continue_times


def test_a_held_run_can_be_cancelled() -> None:
    r = Run(spin)
    assert r.s.timers
    events = r.send(CancelWorkflow("enough"), T0 + 5)
    assert isinstance(events[-1], WorkflowCancelled) and r.s.is_terminal


def test_held_until_counts_only_the_window() -> None:
    full = tuple(T0 + i for i in range(N))
    assert held_until(full[1:], T0 + N) is None  # one under the budget
    assert held_until(full, T0 + N) == T0 + W
    assert held_until(full, T0 + W) is None  # the oldest has just left the window
    assert held_until((), T0) is None
