"""Nothing of one run is applied to another (docs/workflows.md, "Runs and their ids").

Activity and timer ids carry their run (:func:`orchestrator.domain.model.keys.visit_tag`),
and every command that names one is checked here before it changes anything:

* a worker's report (completion, failure, heartbeat) of another run (its envelope's run
  id is not the run's) or of an activity the run never scheduled is refused;
* a timer fire of another run, or before the armed timer's ``fire_at``, is refused;
* a child start whose workflow id names a run that is not that step's child (a finished
  run, a run of another workflow, a child of another step or run, the parent itself) is
  refused, and the engine fails the parent's step with the reason.

A refusal raises ``CommandRejected``: a live run records it as ``CommandRefused``, never
applies it. ``ENGINE_ONLY_COMMANDS`` are the commands only the engine issues to itself,
in-process; one that arrives on the commands topic is refused the same way.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import (
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    StartWorkflow,
)
from orchestrator.domain.model.state import ActivityState, TimerState, WorkflowState

__all__ = [
    "CHILD_ID_IN_USE",
    "ENGINE_ONLY_COMMANDS",
    "check_child_start",
    "describe_report",
    "due_timer",
    "engine_only_reason",
    "own_activity",
]

#: Commands the engine issues to itself and decides in-process, never read from the
#: commands topic: a timer's fire (the engine's timer heap). The engine's other commands
#: (a child's start, its report to the parent, a child's cancel) cross partitions, so
#: they travel on the topic and are checked like any other (own_activity,
#: check_child_start).
ENGINE_ONLY_COMMANDS: frozenset[type] = frozenset({FireTimer})
#: The error type a parent's child step fails with when its child id names another run.
CHILD_ID_IN_USE = "ChildWorkflowIdInUse"


def engine_only_reason(payload: Any) -> str | None:
    """Why a command read from the commands topic is refused (None: it may come from there)."""
    if type(payload) not in ENGINE_ONLY_COMMANDS:
        return None
    return (
        f"{type(payload).__name__} is issued only by the engine itself; one read from the "
        "commands topic is refused, never applied"
    )


def describe_report(payload: Any) -> str:
    """How a refusal names a report (``completion of activity 'x' attempt 2``)."""
    kind = {CompleteActivity: "completion", FailActivity: "failure"}.get(type(payload), "heartbeat")
    return f"{kind} of activity '{payload.activity_id[:200]}' attempt {payload.attempt}"


def _check_run(s: WorkflowState, cmd: Envelope[Any], what: str) -> None:
    run = cmd.run_id
    if run and run != s.run_id:
        raise CommandRejected(
            f"{what} is of run '{run[:100]}', not of the current run '{s.run_id}' of "
            f"workflow '{s.workflow_id}'; refused, never applied to another run"
        )


def own_activity(s: WorkflowState, cmd: Envelope[Any], activity_id: str) -> ActivityState:
    """The activity a report names, in the run the report belongs to; refused when the
    report is of another run (its envelope's run id, when it carries one) or names an
    activity this run never scheduled (e.g. one of a run before a continue-as-new)."""
    what = describe_report(cmd.payload)
    _check_run(s, cmd, what)
    act = s.activities.get(activity_id)
    if act is None:
        raise CommandRejected(
            f"run '{s.run_id}' of workflow '{s.workflow_id}' has no activity "
            f"'{activity_id[:200]}'; {what} refused"
        )
    return act


def due_timer(s: WorkflowState, cmd: Envelope[Any], timer_id: str) -> TimerState | None:
    """The armed timer a fire names, None when it is not armed (it fired already or its
    wait ended: the engine's heap keeps stale entries); refused when the fire is of
    another run or earlier than the timer's ``fire_at``."""
    what = f"fire of timer '{timer_id[:200]}'"
    _check_run(s, cmd, what)
    timer = s.timers.get(timer_id)
    if timer is not None and cmd.recorded_at < timer.fire_at:
        raise CommandRejected(
            f"{what} at {cmd.recorded_at} is {timer.fire_at - cmd.recorded_at} ms before it "
            f"is due ({timer.fire_at}); refused"
        )
    return timer


def check_child_start(s: WorkflowState, p: StartWorkflow) -> None:
    """Refuse a child start (``p`` names a parent) for an existing run ``s`` that is not
    the child that parent's step started: the id names another run."""
    if p.parent_workflow_id is None:
        return
    if s.parent_workflow_id == p.parent_workflow_id and s.parent_activity_id == (
        p.parent_activity_id
    ):
        return  # the same start again (a redelivery): it writes nothing
    if s.workflow_id == p.parent_workflow_id:
        whose = "the parent itself"
    elif s.parent_workflow_id is None:
        whose = f"a run of workflow '{s.name}' v{s.version} ({s.status})"
    else:
        whose = (
            f"a run of workflow '{s.name}' v{s.version} ({s.status}) started by "
            f"'{s.parent_workflow_id}' for activity '{s.parent_activity_id}'"
        )
    raise CommandRejected(
        f"child workflow id '{s.workflow_id}' of activity '{p.parent_activity_id}' names "
        f"{whose}, not a child of this step; the child start is refused"
    )
