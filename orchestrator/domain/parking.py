"""A run whose version this process does not have is *parked*, not crashed.

Several versions of a workflow live side by side (docs/versioning.md); during a deploy,
or when an old version is removed too early, a command can reach a process that lacks
the run's (name, version). Guessing would decide with the wrong code, so the decider
refuses, and the run says why:

* the first such command records ``WorkflowNeedsAttention("", reason)`` with a reason
  starting with :data:`VERSION_MISSING` (the run shows ``needs_attention``), and raises
  :class:`RunParked` carrying that event; the orchestrator writes the event and keeps
  the command itself as a dead letter whose reason starts with ``parked:``, so nothing
  is lost (``keel dlq redrive`` sends it again);
* later commands raise :class:`RunParked` with no event, and are kept the same way;
* a process that has the version decides the redriven command normally; any event after
  the parking clears the parked reason when folded, so the run goes on where it was.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.errors import CommandRejected
from orchestrator.domain.state import WorkflowState

__all__ = ["PARKED", "VERSION_MISSING", "RunParked", "is_parked", "missing_version_reason"]

#: The prefix of the attention reason of a parked run (how folding recognizes it).
VERSION_MISSING = "version missing: "
#: The prefix of the dead-letter reason of a command kept for a parked run.
PARKED = "parked: "


class RunParked(CommandRejected):
    """The run's version is not in this process; ``events`` (zero or one
    ``WorkflowNeedsAttention``) are to be written and ``state`` is the state after them."""

    def __init__(self, reason: str, state: WorkflowState, events: list[Any]) -> None:
        super().__init__(reason)
        self.state = state
        self.events = events


def missing_version_reason(state: WorkflowState) -> str:
    """Why a run of a version this process lacks cannot go on here (one line)."""
    return (
        f"{VERSION_MISSING}workflow '{state.workflow_id}' runs '{state.name}' "
        f"v{state.version} (digest {state.digest[:12]}), which this process does not have; "
        "deploy it, then `keel dlq redrive` the run's parked commands"
    )


def is_parked(state: WorkflowState) -> bool:
    """True when the run waits for a process that has its version."""
    reason = state.attention_reason
    return reason is not None and reason.startswith(VERSION_MISSING)
