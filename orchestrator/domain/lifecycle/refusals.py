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

from orchestrator.domain.model.messages import CommandRefused, Envelope
from orchestrator.domain.model.state import WorkflowState, remember_command

__all__ = ["APPLIERS", "MAX_REFUSAL_CHARS"]

#: The longest reason a refusal records (the rest is cut, with a mark).
MAX_REFUSAL_CHARS = 2000


def _refused(lookup: Any, n: WorkflowState, p: CommandRefused, env: Envelope[Any]) -> None:
    if env.causation_id is not None:  # recorded, never applied: a redelivery writes nothing
        n.seen_commands = remember_command(n.seen_commands, env.causation_id)


APPLIERS: dict[type, Callable[[Any, WorkflowState, Any, Envelope[Any]], None]] = {
    CommandRefused: _refused,
}
