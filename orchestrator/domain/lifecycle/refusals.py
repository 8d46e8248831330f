"""Refused commands in their run's history (docs/activities.md, "Dead letters").

A command a live run refuses (a decision the run will not take, a signal it does not wait
for, a stale approval, ...) is not a dead letter: nothing is wrong with the log, only with
what the sender asked. The run records ``CommandRefused`` (the command's type, its name
and the reason; the envelope's causation id is the command's message id) and its sender
reads the answer there. The event changes nothing but the run's memory of commands, so a
redelivery of the same command writes nothing. A finished run records nothing more (its
history ends with its terminal event), and an unknown workflow has no history to record in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.domain.model.messages import (
    CancelWorkflow,
    CommandRefused,
    CompleteActivity,
    DecideHumanTask,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    MigrateWorkflow,
    RedriveActivity,
    ResolveActivity,
    SignalWithStart,
    SignalWorkflow,
    TerminateWorkflow,
)
from orchestrator.domain.model.state import WorkflowState, remember_command

__all__ = ["APPLIERS", "MAX_REFUSAL_CHARS", "describe_command"]

#: The longest reason a refusal records (the rest is cut, with a mark).
MAX_REFUSAL_CHARS = 2000


def describe_command(payload: Any) -> str:
    """How a refusal names the command (``signal 'x'``, ``cancel``, ...)."""
    name = _DESCRIPTIONS.get(type(payload))
    return name(payload) if name is not None else type(payload).__name__


_DESCRIPTIONS: dict[type, Callable[[Any], str]] = {
    SignalWorkflow: lambda p: f"signal '{p.signal_name}'",
    SignalWithStart: lambda p: f"signal-with-start of signal '{p.signal_name}'",
    CancelWorkflow: lambda p: "cancel",
    TerminateWorkflow: lambda p: "terminate",
    CompleteActivity: lambda p: f"completion of activity '{p.activity_id}'",
    FailActivity: lambda p: f"failure of activity '{p.activity_id}'",
    FireTimer: lambda p: f"timer '{p.timer_id}'",
    HeartbeatActivity: lambda p: f"heartbeat of activity '{p.activity_id}'",
    ResolveActivity: lambda p: f"resolution of activity '{p.activity_id}'",
    RedriveActivity: lambda p: f"redrive of activity '{p.activity_id}'",
    DecideHumanTask: lambda p: f"decision of human task '{p.task_id or '(by token)'}'",
    MigrateWorkflow: lambda p: f"migration to version {p.to_version}",
}


def _refused(lookup: Any, n: WorkflowState, p: CommandRefused, env: Envelope[Any]) -> None:
    if env.causation_id is not None:  # recorded, never applied: a redelivery writes nothing
        n.seen_commands = remember_command(n.seen_commands, env.causation_id)


APPLIERS: dict[type, Callable[[Any, WorkflowState, Any, Envelope[Any]], None]] = {
    CommandRefused: _refused,
}
