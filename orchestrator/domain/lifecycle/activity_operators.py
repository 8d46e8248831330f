"""The operator's way out of an activity that waits for a person (docs/activities.md).

An activity whose outcome stayed unknown is settled by a ``ResolveActivity`` (found, not
found, failed); one past its retry bounds is sent again by a ``RedriveActivity``. They
live apart from the worker's reports and the retry policy: only an operator reaches them.
"""

from __future__ import annotations

from orchestrator.domain.lifecycle.activities import (
    RESOLUTIONS,
    Decision,
    command_json,
    dispatch_again,
    label,
    read_version,
)
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityRedriven,
    ActivityResolved,
    RedriveActivity,
    ResolveActivity,
)
from orchestrator.domain.model.state import ATTENTION, ActivityState
from orchestrator.domain.model.vocabulary import ActivityStatus, Resolution

__all__ = ["on_redrive", "on_resolve"]

_A = ActivityStatus


def on_resolve(d: Decision, p: ResolveActivity) -> None:
    what = f"resolution of activity '{p.activity_id}'"
    if not _fresh(d, what):
        return
    if p.resolution not in RESOLUTIONS:
        raise CommandRejected(
            f"resolution of activity '{p.activity_id}' must be one of "
            f"{', '.join(RESOLUTIONS)}; got '{p.resolution[:100]}'"
        )
    act = _operator_target(d, p.activity_id, _A.ATTENTION, what)
    if p.resolution == Resolution.FOUND:
        result = f"result of activity '{p.activity_id}'"
        command_json(p.result_json, result, f"{result} is not valid JSON")
    d.emit(ActivityResolved(p.activity_id, p.resolution, p.reason))
    if p.resolution == Resolution.FOUND:
        d.emit(
            ActivityCompleted(
                act.activity_id, act.attempt, p.result_json, read_version(d, act.step)
            )
        )
        d.advance()
    elif p.resolution == Resolution.NOT_FOUND:
        dispatch_again(d, d.s.activities[act.activity_id])
    else:
        d.fail_step(
            act,
            f"{label(act)} failed: its outcome stayed unknown and an operator resolved it "
            f"as failed: {p.reason}",
        )


def on_redrive(d: Decision, p: RedriveActivity) -> None:
    what = f"redrive of activity '{p.activity_id}'"
    if not _fresh(d, what):
        return
    act = _operator_target(d, p.activity_id, _A.DEAD_LETTERED, what)
    d.emit(ActivityRedriven(act.activity_id))
    dispatch_again(d, d.s.activities[act.activity_id])


def _fresh(d: Decision, what: str) -> bool:
    """False for a redelivered command (it wrote already); a finished run refuses it."""
    s = d.s
    if d.cmd.message_id in s.seen_commands:
        return False
    if s.is_terminal:
        raise CommandRejected(f"workflow '{s.workflow_id}' is {s.status}; {what} refused")
    return True


def _operator_target(d: Decision, activity_id: str, status: str, what: str) -> ActivityState:
    s = d.s
    act = s.activities.get(activity_id)
    if act is None:
        raise CommandRejected(
            f"workflow '{s.workflow_id}' has no activity '{activity_id}'; {what} refused"
        )
    if act.status != status:
        need = "awaiting resolution" if status == _A.ATTENTION else "dead-lettered"
        hint = ""
        if act.status in ATTENTION:
            hint = " (use redrive)" if act.status == _A.DEAD_LETTERED else " (use resolve)"
        raise CommandRejected(
            f"activity '{activity_id}' of workflow '{s.workflow_id}' is not {need}, it is "
            f"{act.status}{hint}; {what} refused"
        )
    return act
