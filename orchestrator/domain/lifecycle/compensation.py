"""Compensation, the built-in saga: undo a run's committed effects when it fails or is
cancelled (docs/sagas.md).

Every completed step that declares a
:class:`~orchestrator.domain.authoring.definitions.Compensation` is recorded, in order of
completion, in ``WorkflowState.effects``. When the run would end ``failed`` (any failure path: a
step out of retries, a ``fail=`` state, a timed-out signal, a rejected human task, a definition
function that raised) or ``cancelled`` (and the definition's ``on_cancel`` is ``compensate``)
while it holds effects, the decision records ``CompensationStarted`` instead, with the plan:
those effects newest first. So a DAG's parallel branches are undone after their dependants (a
dependant completes after what it depends on) and a state visited twice has both visits' effects
undone, the second visit's first.

The compensations then run one at a time, each an ordinary activity with its own
idempotency key (``K`` of the compensation activity), its retry policy, timeout and
status query; its input is computed from the recorded result of the step it undoes.
One that fails past its bounds is recorded as ``CompensationFailed`` and the next one
runs. At the end the run is ``compensated`` (``WorkflowCompensated``), ``cancelled``
(a cancel whose compensations all succeeded) or ``compensation_failed``: a human task
(``HumanTaskOpened``, resource ``keel.compensate``) lists what is left to undo, with
the evidence, then ``WorkflowCompensationFailed`` ends the run.

A step still in flight when compensation begins is abandoned like any activity of a
state the run leaves: only completed effects are undone.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from orchestrator.domain.authoring.waits import operation_digest, sha256_hex
from orchestrator.domain.lifecycle import activities
from orchestrator.domain.lifecycle.activities import RunNeedsAttention, check_computed
from orchestrator.domain.lifecycle.human_tasks import TaskTokenHash, task_id_for
from orchestrator.domain.model.fingerprint import canonical_json
from orchestrator.domain.model.frozen_init import replace
from orchestrator.domain.model.keys import (
    compensated_activity,
    compensation_id,
    idempotency_key,
    is_compensation,
)
from orchestrator.domain.model.messages import (
    CompensationFailed,
    CompensationStarted,
    Envelope,
    HumanTaskOpened,
    WorkflowCancelled,
    WorkflowCompensated,
    WorkflowCompensationFailed,
    WorkflowFailed,
)
from orchestrator.domain.model.state import ActivityState, CompensationState, WorkflowState
from orchestrator.domain.model.vocabulary import CompensationCause, OnCancel

__all__ = [
    "APPLIERS",
    "COMPENSATION_RESOURCE",
    "COMPENSATION_TASK",
    "compensation_task_id",
    "fail",
    "intercept",
    "progress",
]

#: The name of the human task a failed compensation opens.
COMPENSATION_TASK = "undo_by_hand"
#: The resource of its operation: the compensations left, with their keys and inputs.
COMPENSATION_RESOURCE = "keel.compensate"
#: Its task id's state part (visit 0: no state of a definition has a visit 0).
_TASK_STATE = "compensation"


class Decision(activities.Decision, Protocol):
    """What compensation needs from the decision it runs in."""

    task_token_hash: TaskTokenHash | None


def compensation_task_id(workflow_id: str, run_id: str) -> str:
    """The id of the human task a run's failed compensation opens."""
    return task_id_for(workflow_id, run_id, _TASK_STATE, 0)


def intercept(d: Decision, payload: Any) -> bool:
    """Begin compensating instead of recording ``payload`` (a ``WorkflowFailed`` or
    ``WorkflowCancelled``) when the run holds effects; True when it did."""
    s = d.s
    if s.compensation is not None or not s.effects or s.attention_reason is not None:
        return False
    if isinstance(payload, WorkflowFailed):
        cause = CompensationCause.FAILED
    elif isinstance(payload, WorkflowCancelled) and d.defn.on_cancel == OnCancel.COMPENSATE:
        cause = CompensationCause.CANCELLED
    else:
        return False
    plan = list(reversed(s.effects))
    d.emit(CompensationStarted(str(cause), payload.reason, canonical_json(plan)))
    progress(d)
    return True


def progress(d: Decision) -> None:
    """Dispatch the next compensation, or end the run once none is left."""
    while True:
        c = d.s.compensation
        if c is None or d.s.is_terminal or c.current is not None:
            return
        if not c.pending:
            _finish(d, c)
            return
        if _dispatch(d, c.pending[0]):
            return


def fail(d: Decision, act: ActivityState, reason: str) -> None:
    """A compensation failed past its bounds: give it up and go on with the others."""
    d.emit(CompensationFailed(compensated_activity(act.activity_id), reason))
    progress(d)


def _dispatch(d: Decision, forward_id: str) -> bool:
    """Schedule the compensation of ``forward_id``; False when it could not be computed
    (then recorded as failed)."""
    s = d.s
    act = s.activities[forward_id]
    step = d.defn.steps_by_name.get(act.step)
    comp = step.undo if step is not None else None
    what = f"compensation of step '{act.step}' ({forward_id})"
    if comp is None:
        d.emit(CompensationFailed(forward_id, f"{what}: the definition declares none now"))
        return False
    try:
        result = json.loads(act.result_json or "null")
        value = result if comp.input is None else comp.input(result)
        input_json = canonical_json(value)
        check_computed(input_json, f"input of the {what}")
    except (Exception, RunNeedsAttention) as exc:
        d.emit(CompensationFailed(forward_id, f"input of the {what} failed: {exc!r}"[:2000]))
        return False
    logical = s.logical_attempts.get(comp.activity_type, 0) + 1
    key = idempotency_key(s.workflow_id, comp.activity_type, logical)
    cid = compensation_id(forward_id)
    governing = d.defn.compensation_steps[act.step]
    activities.dispatch(
        d, governing, act.step, cid, comp.activity_type, input_json, logical, 1, key
    )
    return True


def _left(d: Decision, c: CompensationState) -> list[dict[str, Any]]:
    s = d.s
    out = []
    for forward_id in c.failed:
        act = s.activities[forward_id]
        step = d.defn.steps_by_name.get(act.step)
        comp = step.undo if step is not None else None
        undo = s.activities.get(compensation_id(forward_id))
        out.append(
            {
                "step": act.step,
                "activity_id": forward_id,
                "activity_type": act.activity_type,
                "idempotency_key": act.idempotency_key,
                "result": json.loads(act.result_json or "null"),
                "compensation": comp.activity if comp is not None else None,
                "compensation_key": undo.idempotency_key if undo is not None else None,
                "compensation_input": json.loads(undo.input_json) if undo is not None else None,
            }
        )
    return out


def _finish(d: Decision, c: CompensationState) -> None:
    s = d.s
    if not c.failed:
        if c.cause == CompensationCause.CANCELLED:
            d.emit(WorkflowCancelled(c.reason))
        else:
            d.emit(WorkflowCompensated(c.reason))
        return
    left = _left(d, c)
    errors = {e["activity_id"]: _failure_reason(s, e["activity_id"]) for e in left}
    evidence = {
        "cause": c.cause,
        "reason": c.reason,
        "left_to_undo": [{**e, "error": errors[e["activity_id"]]} for e in left],
        "undone": list(c.done),
    }
    arguments = canonical_json(left)
    args_digest = sha256_hex(arguments)
    task_id = compensation_task_id(s.workflow_id, s.run_id)
    evidence_json = canonical_json(evidence)
    role = d.defn.compensation_role
    hasher = d.task_token_hash
    d.emit(
        HumanTaskOpened(
            task_id=task_id,
            task_name=COMPENSATION_TASK,
            owner=role,
            role=role,
            evidence_json=evidence_json,
            evidence_digest=sha256_hex(evidence_json),
            resource=COMPENSATION_RESOURCE,
            arguments_digest=args_digest,
            schema_version=1,
            policy_version="1",
            operation_digest=operation_digest(COMPENSATION_RESOURCE, args_digest, 1, "1"),
            due_at=0,
            expires_at=0,
            token_hash="" if hasher is None else hasher(task_id),
        )
    )
    steps = ", ".join(f"'{e['step']}' ({e['activity_id']})" for e in left)
    d.emit(
        WorkflowCompensationFailed(
            f"{c.reason}; the compensation of {steps} failed: an operator must undo it by "
            f"hand (human task '{task_id}')",
            task_id,
        )
    )


def _failure_reason(s: WorkflowState, forward_id: str) -> str:
    undo = s.activities.get(compensation_id(forward_id))
    if undo is None:
        return "the compensation could not be scheduled"
    return f"{undo.error_type or ''}: {undo.error_message or ''}".strip(": ")


# -- folding (registered in evolve.APPLIERS) -------------------------------------------------


def on_scheduled(n: WorkflowState, activity_id: str, first: bool) -> None:
    """A compensation was dispatched: the first dispatch makes it the current one."""
    c = n.compensation
    if not first or c is None or not is_compensation(activity_id):
        return
    forward = compensated_activity(activity_id)
    n.compensation = replace(
        c, current=forward, pending=tuple(a for a in c.pending if a != forward)
    )


def on_completed(n: WorkflowState, activity_id: str) -> None:
    c = n.compensation
    if c is not None:
        forward = compensated_activity(activity_id)
        n.compensation = replace(c, current=None, done=(*c.done, forward))


def _failed(lookup: Any, n: WorkflowState, p: CompensationFailed, env: Envelope[Any]) -> None:
    c = n.compensation
    assert c is not None
    n.compensation = replace(
        c,
        current=None if c.current == p.activity_id else c.current,
        pending=tuple(a for a in c.pending if a != p.activity_id),
        failed=(*c.failed, p.activity_id),
    )


#: ``CompensationStarted`` is folded by evolve (it leaves the state like a transition).
APPLIERS: dict[type, Any] = {CompensationFailed: _failed}
