"""Stopping a run on request: cancel (compensates as the definition says) and terminate.

A cancel records ``WorkflowCancelled``; when the run holds committed effects and its
definition's ``on_cancel`` is ``compensate``, the emission begins compensating instead
(:func:`orchestrator.domain.lifecycle.compensation.intercept`), and a run already
compensating refuses a cancel (its compensations run to the end). A terminate is the
operator's hard stop, Temporal's ``terminate``: it records ``WorkflowTerminated`` at once,
compensates nothing (even mid-compensation: what was undone stays undone, the rest stays
committed) and works on a run that needs attention. Both refuse a finished run and write
nothing for a redelivery (docs/workflows.md, "Cancel and terminate").
"""

from __future__ import annotations

from typing import Any, Protocol

from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import (
    CancelWorkflow,
    Envelope,
    TerminateWorkflow,
    WorkflowCancelled,
    WorkflowTerminated,
)
from orchestrator.domain.model.state import WorkflowState

__all__ = ["STOP_COMMANDS", "on_cancel", "on_terminate"]

#: The commands a run that needs attention still takes: an operator may always stop it.
STOP_COMMANDS = (CancelWorkflow, TerminateWorkflow)


class Decision(Protocol):
    cmd: Envelope[Any]

    @property
    def s(self) -> WorkflowState: ...

    def emit(self, payload: Any) -> None: ...


def _refuse_if_finished(s: WorkflowState, what: str) -> None:
    if s.is_terminal:
        raise CommandRejected(f"workflow '{s.workflow_id}' is {s.status}; {what} refused")


def on_cancel(d: Decision, p: CancelWorkflow) -> None:
    s = d.s
    if d.cmd.message_id in s.seen_commands:
        return
    _refuse_if_finished(s, "cancel")
    if s.compensation is not None:
        raise CommandRejected(
            f"workflow '{s.workflow_id}' is compensating (its compensations run to the end); "
            "cancel refused"
        )
    d.emit(WorkflowCancelled(p.reason))


def on_terminate(d: Decision, p: TerminateWorkflow) -> None:
    if d.cmd.message_id in d.s.seen_commands:
        return
    _refuse_if_finished(d.s, "terminate")
    d.emit(WorkflowTerminated(p.reason))
