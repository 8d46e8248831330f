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

A process that must *rebuild* such a run cannot fold its history (folding reads the
definition), so it holds a :func:`stand_in`: the run's identity, last seq and parked
reason, read from the events alone. Commands are parked against it as above; it is never
checkpointed (``unfolded_from``), so a process with the version folds the real history.
A parked command's dead-letter reason names the run's (name, version)
(:func:`parked_version`), so a process that has it redrives the command when it starts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from orchestrator.domain.model.errors import CommandRejected, HistoryError
from orchestrator.domain.model.messages import (
    Envelope,
    WorkflowContinuedAsNew,
    WorkflowNeedsAttention,
    WorkflowStarted,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import WorkflowStatus

__all__ = [
    "PARKED",
    "VERSION_MISSING",
    "RunParked",
    "is_parked",
    "missing_version_reason",
    "parked_version",
    "stand_in",
]

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


_PARKED_RE = re.compile(
    r"^" + re.escape(PARKED) + r"workflow '.*' runs '([A-Za-z_][A-Za-z0-9_.-]*)' v(\d+) "
    r"\(digest [0-9a-f]*\), which this process does not have",
    re.DOTALL,
)


def parked_version(letter_reason: str) -> tuple[str, int] | None:
    """The (name, version) a parked command waits for, from its dead-letter reason
    (None: not a parked command)."""
    found = _PARKED_RE.match(letter_reason)
    return None if found is None else (found.group(1), int(found.group(2)))


def stand_in(
    base: WorkflowState | None, events: Iterable[Envelope[Any]], unfolded_from: int
) -> WorkflowState:
    """What a process without the run's definition holds for it: ``base`` (a snapshot,
    or None) advanced over ``events`` without folding them: identity, last seq, the run
    id (a continued run's) and whether the run is already parked. ``unfolded_from`` is
    the log offset of the first event not folded (the checkpoint stays before it)."""
    state = None if base is None else base.clone()
    for env in events:
        p = env.payload
        if state is None:
            if not isinstance(p, WorkflowStarted):
                raise HistoryError(f"workflow '{env.workflow_id}': history starts with {env.type}")
            state = WorkflowState(
                env.workflow_id,
                env.run_id,
                p.name,
                p.version,
                p.definition_digest,
                p.input_json,
                seq=env.seq,
                started_at=env.recorded_at,
                input_schema_version=p.input_schema_version,
            )
        elif env.seq <= state.seq:
            continue
        if isinstance(p, WorkflowNeedsAttention):
            if not p.activity_id:
                state.attention_reason = p.reason
        elif isinstance(p, WorkflowContinuedAsNew):
            state.run_id, state.run_base_seq, state.input_json = p.new_run_id, env.seq, p.input_json
        elif is_parked(state):  # an event decided after the parking by a process with it
            state.attention_reason = None
        state.seq, state.updated_at = env.seq, env.recorded_at
    if state is None:
        raise HistoryError("no events to hold")
    if state.attention_reason is not None:
        state.status = WorkflowStatus.NEEDS_ATTENTION
    state.unfolded_from = unfolded_from
    return state.seal()
