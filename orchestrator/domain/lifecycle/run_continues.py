"""Continue-as-new: the next run's input, and the workflow's continue budget.

A workflow continues as new at most ``MAX_CONTINUES_PER_WINDOW`` times within any
``CONTINUE_WINDOW_MS`` of recorded time (docs/limits.md). One more is *held*, not failed:
the run stays in its state with a durable ``continue`` timer (``<state>#<visit>/continue``)
due when the oldest continue of the window leaves it, and continues when that timer fires.

Held rather than failed because a long-lived workflow exists to live on: a burst (a batch of
signals) must not end it and lose its inbox, while a loop without a wait is slowed to the
budget instead of writing runs as fast as the engine decides (issue 44: 22,700 runs in
45 s). Like Temporal's backoff before a continued run's first task, the delay is a recorded
timer, and the budget counts the recorded times of the workflow's ``WorkflowContinuedAsNew``
events (``WorkflowState.continue_times``): a replay decides the same, no clock is read here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from orchestrator.domain.authoring.definitions import State, WorkflowDefinition, canonical_json
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.lifecycle.activities import UserCodeFailed, check_computed
from orchestrator.domain.lifecycle.run_starts import continued_run_id, recent_continues
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.limits import CONTINUE_WINDOW_MS, MAX_CONTINUES_PER_WINDOW
from orchestrator.domain.model.messages import Envelope, WorkflowContinuedAsNew
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import TimerPurpose

__all__ = ["continue_as_new", "held_until"]


class Decision(Protocol):
    """What continuing needs from the decision it runs in."""

    defn: WorkflowDefinition
    cmd: Envelope[Any]
    run_id: str

    @property
    def s(self) -> WorkflowState: ...

    def emit(self, payload: Any) -> None: ...

    def enter(self, name: str) -> None: ...

    def call(self, fn: Callable[[Context], Any], what: str) -> Any: ...

    def use(self, value: Any, convert: Callable[[Any], Any], problem: str) -> Any: ...

    def arm_timer(self, purpose: TimerPurpose, timer_id: str, fire_at: int) -> None: ...


def held_until(continue_times: tuple[int, ...], now: int) -> int | None:
    """When a continue asked for at ``now`` may happen: None when the budget allows it
    now, else the time the oldest of the window's latest continues leaves the window."""
    recent = recent_continues(continue_times, now)
    if len(recent) < MAX_CONTINUES_PER_WINDOW:
        return None
    return recent[-MAX_CONTINUES_PER_WINDOW] + CONTINUE_WINDOW_MS


def continue_as_new(d: Decision, st: State) -> bool:
    """End this run and start the next one of the same workflow and definition; False
    when the budget holds the continue (its timer armed once, the run waits in ``st``)."""
    assert st.continue_as_new is not None
    until = held_until(d.s.continue_times, d.cmd.recorded_at)
    if until is not None:
        purpose = TimerPurpose.continue_as_new()
        if str(purpose) not in d.s.timer_index:
            d.arm_timer(purpose, purpose.timer_id(d.s.visit_tag()), until)
        return False
    value = d.call(st.continue_as_new, "continue_as_new input")
    input_json = d.use(value, canonical_json, "continue_as_new input is not JSON")
    check_computed(input_json, f"state '{st.name}': continue_as_new input")
    try:
        d.defn.parse_input(input_json)
    except InvalidInputError as exc:
        raise UserCodeFailed(f"state '{st.name}': continue_as_new input: {exc}") from None
    seq = d.s.seq + 1
    new_run = continued_run_id(d.s.workflow_id, d.run_id, seq)
    d.emit(WorkflowContinuedAsNew(new_run, input_json))
    d.run_id = new_run
    d.enter(d.defn.initial)
    return True
