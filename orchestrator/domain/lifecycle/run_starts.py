"""The state a run begins with: its first event's (``started``) or the one a
``WorkflowContinuedAsNew`` hands over (``continued``); ``evolve`` re-exports both."""

from __future__ import annotations

import uuid
from typing import Any

from orchestrator.domain.model.errors import HistoryError
from orchestrator.domain.model.limits import CONTINUE_WINDOW_MS, MAX_CONTINUES_PER_WINDOW
from orchestrator.domain.model.messages import Envelope, WorkflowContinuedAsNew, WorkflowStarted
from orchestrator.domain.model.state import WorkflowState, remember_command

__all__ = ["continued", "continued_run_id", "recent_continues", "started"]


def started(event: Envelope[Any]) -> WorkflowState:
    """The state a run's first event creates."""
    p = event.payload
    if not isinstance(p, WorkflowStarted):
        raise HistoryError(
            f"workflow '{event.workflow_id}': history starts with {event.type} "
            f"(seq {event.seq}), not WorkflowStarted"
        )
    return WorkflowState(
        workflow_id=event.workflow_id,
        run_id=event.run_id,
        name=p.name,
        version=p.version,
        digest=p.definition_digest,
        input_json=p.input_json,
        seq=event.seq,
        started_at=event.recorded_at,
        updated_at=event.recorded_at,
        input_schema_version=p.input_schema_version,
        parent_workflow_id=p.parent_workflow_id,
        parent_activity_id=p.parent_activity_id,
    )


def continued(n: WorkflowState, p: WorkflowContinuedAsNew, event: Envelope[Any]) -> WorkflowState:
    """The fresh state of the run ``event`` starts, carrying forward only what a later
    command needs: seen command ids, undelivered signals, closed correlations, the latest
    human tasks, every signal command id (a webhook re-sent days later is a duplicate),
    the logical-attempt counters (no idempotency key is issued twice: docs/activities.md),
    the continue budget's recent continues (docs/limits.md) and a child's parent."""
    seen = n.seen_commands
    if event.causation_id is not None:
        seen = remember_command(seen, event.causation_id)
    return WorkflowState(
        workflow_id=n.workflow_id,
        run_id=p.new_run_id,
        name=n.name,
        version=n.version,
        digest=n.digest,
        input_json=p.input_json,
        seq=event.seq,
        inbox=n.inbox,
        correlated_inbox=n.correlated_inbox,
        closed_correlations=n.closed_correlations,
        human_tasks=dict(n.human_tasks),
        seen_commands=seen,
        signal_commands=n.signal_commands,
        logical_attempts=dict(n.logical_attempts),
        run_base_seq=event.seq,
        continue_times=(*recent_continues(n.continue_times, event.recorded_at), event.recorded_at)[
            -MAX_CONTINUES_PER_WINDOW:
        ],
        started_at=event.recorded_at,
        updated_at=event.recorded_at,
        parent_workflow_id=n.parent_workflow_id,
        parent_activity_id=n.parent_activity_id,
    )


def continued_run_id(workflow_id: str, run_id: str, seq: int) -> str:
    """The id of the run a ``WorkflowContinuedAsNew`` at ``seq`` starts: deterministic
    (replay makes the same one) and of fixed length however often a run continues."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"keel:{workflow_id}:{run_id}:{seq}"))


def recent_continues(times: tuple[int, ...], now: int) -> tuple[int, ...]:
    """The continues of ``times`` still inside the budget's window at ``now`` (one at
    exactly ``now - CONTINUE_WINDOW_MS`` has left it)."""
    return tuple(t for t in times if t > now - CONTINUE_WINDOW_MS)
