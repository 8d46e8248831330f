"""What a parent's and a child's decisions tell each other (docs/child-workflows.md).

A child-workflow step is an activity of the parent whose "task" is the child run: its
``ActivityScheduled`` (activity type ``keel.child:<workflow>``, idempotency key the
child's workflow id) becomes a ``StartWorkflow`` command for the child naming the parent
and the activity; the child's terminal event becomes the parent activity's report
(``CompleteActivity`` with the child's output, or a permanent ``FailActivity`` naming
how it ended); and a child the parent stops awaiting while it runs (the parent ended,
was cancelled or left the state) is sent a ``CancelWorkflow``, or a
``TerminateWorkflow`` when its step says ``parent_close="terminate"``, unless it says
``"abandon"``. Each is a command record in the same transaction as the events that
caused it, with a message id derived from them, so a crash before the commit sends
nothing and a retried decision sends the same ids (a start of an existing id, a report
of an ended attempt and a repeated cancel all write nothing). A child start the child's
partition refuses (its id names another run, ``run_scope.check_child_start``, or its
input does not fit) becomes a permanent ``FailActivity`` of the parent's step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.domain.authoring.definitions import WorkflowDefinition
from orchestrator.domain.lifecycle.run_scope import CHILD_ID_IN_USE
from orchestrator.domain.model.keys import CHILD_ACTIVITY_PREFIX
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CancelWorkflow,
    CompleteActivity,
    Envelope,
    FailActivity,
    StartWorkflow,
    TerminateWorkflow,
    WorkflowCompleted,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import (
    ActivityStatus,
    FailureClass,
    ParentClosePolicy,
    WorkflowStatus,
)
from orchestrator.records.envelopes import command_envelope

__all__ = [
    "abandoned_children",
    "child_refused",
    "child_start",
    "is_child",
    "parent_report",
]

DefinitionFor = Callable[[WorkflowState], WorkflowDefinition]
#: The error type a parent's activity fails with, by how its child run ended.
_ENDED_AS = {
    WorkflowStatus.FAILED: "ChildWorkflowFailed",
    WorkflowStatus.CANCELLED: "ChildWorkflowCancelled",
    WorkflowStatus.TERMINATED: "ChildWorkflowTerminated",
    WorkflowStatus.COMPENSATED: "ChildWorkflowCompensated",
    WorkflowStatus.COMPENSATION_FAILED: "ChildWorkflowCompensationFailed",
}
_REPORTED = (ActivityStatus.COMPLETED, ActivityStatus.FAILED)
#: The command (and its message-id tag) a still-running child gets, by parent-close policy.
_STOPS: dict[ParentClosePolicy, tuple[str, type[CancelWorkflow] | type[TerminateWorkflow]]] = {
    ParentClosePolicy.CANCEL: ("cancel", CancelWorkflow),
    ParentClosePolicy.TERMINATE: ("terminate", TerminateWorkflow),
}


def is_child(activity_type: str) -> bool:
    return activity_type.startswith(CHILD_ACTIVITY_PREFIX)


def child_start(
    definition_for: DefinitionFor, parent: WorkflowState, ev: Envelope[Any], now: int
) -> Envelope[Any]:
    """The ``StartWorkflow`` of the child run a parent's ``ActivityScheduled`` asks for."""
    s: ActivityScheduled = ev.payload
    step = definition_for(parent).step_for(s.activity_id, s.step)
    assert step is not None and step.child_workflow is not None
    start = StartWorkflow(
        step.child_workflow, step.child_version, s.input_json, parent.workflow_id, s.activity_id
    )
    return _command(ev, "child", s.idempotency_key, start, now)


def parent_report(child: WorkflowState, ev: Envelope[Any], now: int) -> Envelope[Any] | None:
    """The report of the parent's activity that a child's terminal event ``ev`` makes."""
    parent, activity_id = child.parent_workflow_id, child.parent_activity_id
    if parent is None or activity_id is None or not getattr(ev.payload, "TERMINAL", False):
        return None
    report: CompleteActivity | FailActivity
    if isinstance(ev.payload, WorkflowCompleted):
        report = CompleteActivity(activity_id, 1, ev.payload.output_json)
    else:
        reason = child.failure_reason or child.cancel_reason or str(child.status)
        error = _ENDED_AS.get(child.status, "ChildWorkflowFailed")
        message = f"child workflow '{child.workflow_id}' ended {child.status}: {reason}"
        report = FailActivity(activity_id, 1, FailureClass.PERMANENT, error, message)
    return _command(ev, "parent", parent, report, now)


def child_refused(start: Envelope[Any], reason: str, in_use: bool, now: int) -> Envelope[Any]:
    """The permanent ``FailActivity`` a parent's child step gets when its child's start
    was refused (its id names another run: ``ChildWorkflowIdInUse``; else
    ``ChildWorkflowStartRefused``): the step fails with the reason, the parent never hangs."""
    p: StartWorkflow = start.payload
    assert p.parent_workflow_id is not None and p.parent_activity_id is not None
    error = CHILD_ID_IN_USE if in_use else "ChildWorkflowStartRefused"
    report = FailActivity(p.parent_activity_id, 1, FailureClass.PERMANENT, error, reason)
    return _command(start, "refused", p.parent_workflow_id, report, now)


def abandoned_children(
    definition_for: DefinitionFor,
    before: WorkflowState | None,
    after: WorkflowState,
    last: Envelope[Any],
    now: int,
) -> list[Envelope[Any]]:
    """A ``CancelWorkflow`` (or, with ``parent_close="terminate"``, a
    ``TerminateWorkflow``) for each child run the decision stopped awaiting unreported,
    unless its step lets it run (``parent_close="abandon"``)."""
    if before is None:
        return []
    out = []
    for aid in sorted(before.in_flight):
        act = before.activities[aid]
        if not is_child(act.activity_type):
            continue
        if aid in after.in_flight and not after.is_terminal:
            continue  # still awaited
        now_act = after.activities.get(aid)
        if now_act is not None and now_act.status in _REPORTED:
            continue  # the child ended and said so
        step = definition_for(after).step_for(aid, act.step)
        policy = ParentClosePolicy.CANCEL if step is None else step.parent_close
        if policy == ParentClosePolicy.ABANDON:
            continue
        why = f"its parent '{after.workflow_id}' ({after.status}) stopped awaiting it"
        tag, stop = _STOPS[ParentClosePolicy(policy)]
        out.append(_command(last, f"{tag}/{aid}", act.idempotency_key, stop(why), now))
    return out


def _command(
    ev: Envelope[Any], tag: str, workflow_id: str, payload: Any, now: int
) -> Envelope[Any]:
    return command_envelope(
        f"{ev.message_id}/{tag}",
        workflow_id,
        payload,
        now,
        causation_id=ev.message_id,
        correlation_id=ev.correlation_id,
        traceparent=ev.traceparent,
    )
