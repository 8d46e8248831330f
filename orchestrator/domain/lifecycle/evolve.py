"""State from events: ``evolve(state, event)`` and ``fold(events)``, pure and deterministic.

Each event type has one applier (:data:`APPLIERS`), which mutates a scratch state it
owns (see the ownership contract in :mod:`orchestrator.domain.model.state`). ``evolve``
clones per event and never changes its input; ``fold`` and a decision clone once, so
folding a history, or deciding a command that emits thousands of events, is linear in
the number of events.

``evolve`` reads the definition in two places only: on ``StateEntered`` it learns the
state's step names and wait ("all steps done", "the wait began" and "an inbox signal was
consumed" then follow from the events); on ``ActivityTimedOut`` whether the step has a
status query (the timeout then leaves the outcome unknown, as it does for a started
``@side_effect`` attempt).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from orchestrator.domain.authoring import migrations
from orchestrator.domain.authoring.definitions import (
    HumanTask,
    SignalWait,
    TimerWait,
    WorkflowDefinition,
)
from orchestrator.domain.lifecycle import compensation, fan_out, human_tasks, refusals, signals
from orchestrator.domain.lifecycle.activities import QUERY_SEP, TIMEOUT_ERROR_TYPES, query_outcome
from orchestrator.domain.lifecycle.missing_versions import VERSION_MISSING
from orchestrator.domain.lifecycle.run_starts import continued, started
from orchestrator.domain.model.errors import HistoryError
from orchestrator.domain.model.frozen_init import replace
from orchestrator.domain.model.keys import is_compensation
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityHeartbeat,
    ActivityRedriven,
    ActivityResolved,
    ActivityScheduled,
    ActivityTimedOut,
    CompensationStarted,
    Envelope,
    StateEntered,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowCompensated,
    WorkflowCompensationFailed,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowNeedsAttention,
    WorkflowStarted,
    WorkflowTerminated,
)
from orchestrator.domain.model.state import (
    ATTENTION,
    ActivityState,
    CompensationState,
    TimerState,
    WaitState,
    WorkflowState,
    remember_command,
)
from orchestrator.domain.model.vocabulary import (
    ActivityStatus,
    FailureClass,
    PurposeKind,
    Resolution,
    TimeoutKind,
    TimerPurpose,
    WaitKind,
    WorkflowStatus,
)

__all__ = [
    "APPLIERS",
    "DefinitionLookup",
    "apply",
    "continued",
    "evolve",
    "fold",
    "leave_state",
    "started",
]

#: How evolve finds the definition a run follows (raises ``HistoryError`` if none).
DefinitionLookup = Callable[[WorkflowState], WorkflowDefinition]
Applier = Callable[[DefinitionLookup, WorkflowState, Any, Envelope[Any]], None]

_A = ActivityStatus


def evolve(
    lookup: DefinitionLookup, state: WorkflowState | None, event: Envelope[Any]
) -> WorkflowState:
    """Fold one event without changing ``state``; an event at or below ``state.seq`` is
    already in and returns ``state`` itself."""
    if state is None:
        return started(event)
    if event.seq <= state.seq:
        return state
    n = state.clone()
    apply(lookup, n, event)
    return n.seal()


def fold(
    lookup: DefinitionLookup, events: Iterable[Envelope[Any]], state: WorkflowState | None
) -> WorkflowState | None:
    """Fold a history (or its tail after ``state``) with one scratch copy: linear."""
    n = None if state is None else state.clone()
    for env in events:
        if n is None:
            n = started(env)
        elif env.seq > n.seq:
            apply(lookup, n, env)
    return None if n is None else n.seal()


def apply(lookup: DefinitionLookup, n: WorkflowState, event: Envelope[Any]) -> None:
    """Fold ``event`` (the next in sequence) into the scratch state ``n``, in place."""
    p = event.payload
    if event.seq != n.seq + 1:
        raise HistoryError(f"workflow '{n.workflow_id}': event seq {event.seq} after {n.seq} (gap)")
    if n.is_terminal:
        raise HistoryError(f"workflow '{n.workflow_id}': {event.type} after the run {n.status}")
    applier = APPLIERS.get(type(p))
    if applier is None:
        raise HistoryError(f"workflow '{n.workflow_id}': {event.type} is not an event")
    before = n.status
    if (
        n.attention_reason is not None
        and n.attention_reason.startswith(VERSION_MISSING)
        and not isinstance(p, WorkflowNeedsAttention)
    ):  # an event after a parking was decided by a process that has the run's version
        n.attention_reason = None
    n.seq = event.seq
    n.updated_at = event.recorded_at
    applier(lookup, n, p, event)
    if n.status.is_terminal:
        return
    w = n.wait
    if n.attention_reason is not None or (
        # only these events put an activity in attention; otherwise a run that did not
        # need attention still does not (and no scan of every activity is needed)
        (before == WorkflowStatus.NEEDS_ATTENTION or type(p) in _ATTENTION_EVENTS)
        and any(n.activities[a].status in ATTENTION for a in n.in_flight)
    ):
        n.status = WorkflowStatus.NEEDS_ATTENTION
    elif n.compensation is not None:
        n.status = WorkflowStatus.COMPENSATING
    elif w is not None and not n.steps_remaining and not w.satisfied:
        n.status = WorkflowStatus.WAITING
    else:
        n.status = WorkflowStatus.RUNNING


_ATTENTION_EVENTS = frozenset({ActivityDeadLettered, WorkflowNeedsAttention})


# -- appliers -------------------------------------------------------------------------


def _started_twice(lookup: DefinitionLookup, n: WorkflowState, p: Any, env: Any) -> None:
    raise HistoryError(f"workflow '{n.workflow_id}': WorkflowStarted twice")


def _state_entered(
    lookup: DefinitionLookup, n: WorkflowState, p: StateEntered, env: Envelope[Any]
) -> None:
    defn = lookup(n)
    st = defn.states.get(p.state)
    if st is None:
        raise HistoryError(f"{defn.label} has no state '{p.state}'")
    _abandon_in_flight(n)
    _leave_wait(n)
    n.clear_timers()
    n.current_state = p.state
    n.visit = p.visit
    n.mut_visits()[p.state] = p.visit
    n.take(steps_remaining={s.name for s in st.steps})
    if isinstance(st.wait, SignalWait):
        n.wait = WaitState(
            kind=WaitKind.SIGNAL,
            signal_name=st.wait.name,
            correlated=st.wait.correlation is not None,
        )
    elif isinstance(st.wait, TimerWait):
        n.wait = WaitState(kind=WaitKind.TIMER)
    elif isinstance(st.wait, HumanTask):
        n.wait = WaitState(kind=WaitKind.HUMAN)
    else:
        n.wait = None
    if not n.steps_remaining:
        signals.begin_wait(n)


def _scheduled(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityScheduled, env: Envelope[Any]
) -> None:
    aid = p.activity_id
    acts = n.mut_activities()
    old = acts.get(aid)
    if old is None:
        parent: str | None = aid[: aid.index(QUERY_SEP)] if QUERY_SEP in aid else None
        if parent is not None and parent not in acts:
            parent = None
        acts[aid] = ActivityState(
            activity_id=aid,
            activity_type=p.activity_type,
            step=p.step,
            state=n.current_state or "",
            visit=n.visit,
            input_json=p.input_json,
            logical_attempt=p.logical_attempt,
            attempt=p.attempt,
            idempotency_key=p.idempotency_key,
            parent=parent,
            first_dispatch_at=env.recorded_at,
        )
        if parent is not None:  # the first dispatch of a status query
            acts[parent] = replace(acts[parent], status=_A.QUERYING)
            n.mut_in_flight().add(parent)
    else:
        acts[aid] = replace(
            old,
            status=_A.SCHEDULED,
            attempt=p.attempt,
            logical_attempt=p.logical_attempt,
            idempotency_key=p.idempotency_key,
            heartbeat_count=0,
            last_heartbeat=None,
            effect_started=False,
        )
        _drop_activity_timers(n, aid)
    n.mut_in_flight().add(aid)
    compensation.on_scheduled(n, aid, first=old is None)
    if old is None:
        fan_out.on_dispatched(n, aid, p.step)
    if n.logical_attempts.get(p.activity_type, 0) < p.logical_attempt:
        n.mut_logical_attempts()[p.activity_type] = p.logical_attempt


def _completed(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityCompleted, env: Envelope[Any]
) -> None:
    act = _activity(n, p.activity_id)
    if _is_late(act, p.attempt):
        _record_late(n, act, p.attempt)
        return
    act = replace(
        act,
        status=_A.COMPLETED,
        attempt=p.attempt,
        result_json=p.result_json,
        heartbeat_count=0,
        last_heartbeat=None,
        effect_started=False,
    )
    acts = n.mut_activities()
    acts[p.activity_id] = act
    n.mut_in_flight().discard(p.activity_id)
    _drop_activity_timers(n, p.activity_id)
    if act.parent is not None:  # a status query answered
        par = acts[act.parent]
        if par.status == _A.QUERYING:
            if query_outcome(p.result_json)[0]:
                acts[act.parent] = replace(par, status=_A.RESOLVING)
            else:  # the effect did not happen (or the answer is unusable)
                acts[act.parent] = replace(par, status=_A.FAILED)
                n.mut_in_flight().discard(act.parent)
        return
    if is_compensation(act.activity_id):
        compensation.on_completed(n, act.activity_id)
        return
    step = lookup(n).steps_by_name.get(act.step)
    if step is not None and step.undo is not None:
        n.effects = (*n.effects, act.activity_id)
    if fan_out.on_completed(n, act):
        return
    n.record_result(act.step, p.result_json, p.schema_version)
    if act.state == n.current_state and act.visit == n.visit and act.step in n.steps_remaining:
        remaining = n.mut_steps_remaining()
        remaining.discard(act.step)
        if not remaining:
            signals.begin_wait(n)


def _failed(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityFailed, env: Envelope[Any]
) -> None:
    old = _activity(n, p.activity_id)
    if _is_late(old, p.attempt):
        _record_late(n, old, p.attempt)
        return
    throttled = p.failure_class == FailureClass.THROTTLED  # it never ran: nothing spent
    n.mut_activities()[p.activity_id] = replace(
        old,
        status=_A.FAILED,
        attempt=p.attempt,
        failure_class=p.failure_class,
        error_type=p.error_type,
        error_message=p.message,
        heartbeat_count=0,
        last_heartbeat=None,
        effect_started=False,
        budget_base=old.budget_base + throttled,
        first_dispatch_at=old.first_dispatch_at + (p.retry_after_ms if throttled else 0),
    )
    n.mut_in_flight().discard(p.activity_id)
    _drop_activity_timers(n, p.activity_id)


def _heartbeat(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityHeartbeat, env: Envelope[Any]
) -> None:
    act = _activity(n, p.activity_id)
    if act.status != _A.SCHEDULED or act.attempt != p.attempt:
        raise HistoryError(
            f"workflow '{n.workflow_id}': heartbeat of activity '{p.activity_id}' attempt "
            f"{p.attempt}, which is not running"
        )
    n.mut_activities()[p.activity_id] = replace(
        act,
        heartbeat_count=act.heartbeat_count + 1,
        last_heartbeat=env.causation_id or env.message_id,
        effect_started=act.effect_started or p.side_effect,
    )
    if not act.started:  # the attempt started: schedule-to-start no longer applies
        _drop_activity_timers(n, p.activity_id, (TimeoutKind.SCHEDULE_TO_START,))


def _timed_out(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityTimedOut, env: Envelope[Any]
) -> None:
    act = _activity(n, p.activity_id)
    step = lookup(n).step_for(act.activity_id, act.step)
    # a side effect that started may have written: never a blind retry (docs/activities.md)
    unknown = (
        p.timeout != TimeoutKind.SCHEDULE_TO_START
        and act.parent is None
        and step is not None
        and (step.status_query is not None or act.effect_started)
    )
    n.mut_activities()[p.activity_id] = replace(
        act,
        status=_A.FAILED,
        attempt=p.attempt,
        failure_class=FailureClass.UNKNOWN if unknown else FailureClass.TRANSIENT,
        error_type=TIMEOUT_ERROR_TYPES.get(p.timeout, "Timeout"),
        error_message=f"{p.timeout} timeout expired",
        heartbeat_count=0,
        last_heartbeat=None,
        effect_started=False,
        timed_out=(*act.timed_out, p.attempt),
    )
    n.mut_in_flight().discard(p.activity_id)
    _drop_activity_timers(n, p.activity_id)


def _dead_lettered(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityDeadLettered, env: Envelope[Any]
) -> None:
    n.mut_activities()[p.activity_id] = replace(
        _activity(n, p.activity_id), status=_A.DEAD_LETTERED
    )
    n.mut_in_flight().add(p.activity_id)


def _needs_attention(
    lookup: DefinitionLookup, n: WorkflowState, p: WorkflowNeedsAttention, env: Envelope[Any]
) -> None:
    if not p.activity_id:  # the run itself (a limit it reached)
        n.attention_reason = p.reason
        return
    n.mut_activities()[p.activity_id] = replace(_activity(n, p.activity_id), status=_A.ATTENTION)
    n.mut_in_flight().add(p.activity_id)


def _redriven(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityRedriven, env: Envelope[Any]
) -> None:
    act = _activity(n, p.activity_id)
    # a fresh budget: max_attempts more attempts, max_elapsed from now
    n.mut_activities()[p.activity_id] = replace(
        act, status=_A.RESOLVING, budget_base=act.attempt, first_dispatch_at=env.recorded_at
    )
    n.mut_in_flight().add(p.activity_id)
    _remember(n, env)


def _resolved(
    lookup: DefinitionLookup, n: WorkflowState, p: ActivityResolved, env: Envelope[Any]
) -> None:
    act = _activity(n, p.activity_id)
    if p.resolution == Resolution.FAILED:
        act = replace(
            act,
            status=_A.FAILED,
            failure_class=FailureClass.UNKNOWN,
            error_type="OutcomeUnknown",
            error_message=p.reason,
        )
        n.mut_in_flight().discard(p.activity_id)
    elif p.resolution == Resolution.NOT_FOUND:  # retried now, with a fresh budget
        act = replace(
            act, status=_A.RESOLVING, budget_base=act.attempt, first_dispatch_at=env.recorded_at
        )
    else:
        act = replace(act, status=_A.RESOLVING)
    n.mut_activities()[p.activity_id] = act
    _remember(n, env)


def _timer_scheduled(
    lookup: DefinitionLookup, n: WorkflowState, p: TimerScheduled, env: Envelope[Any]
) -> None:
    purpose = TimerPurpose.parse(p.purpose)
    # an activity timeout re-armed replaces the older timer (arm_timer does)
    n.arm_timer(p.timer_id, TimerState(p.fire_at, p.purpose))
    if purpose.kind is PurposeKind.RETRY:
        aid = purpose.subject
        n.mut_activities()[aid] = replace(_activity(n, aid), status=_A.BACKOFF)
        n.mut_in_flight().add(aid)
    elif purpose.is_wait and n.wait is not None:
        n.wait = replace(n.wait, timer_id=p.timer_id)


def _timer_fired(
    lookup: DefinitionLookup, n: WorkflowState, p: TimerFired, env: Envelope[Any]
) -> None:
    if p.timer_id not in n.timers:
        raise HistoryError(f"workflow '{n.workflow_id}': timer '{p.timer_id}' is not armed")
    n.drop_timer(p.timer_id)
    w = n.wait
    if w is not None and w.timer_id == p.timer_id and not w.satisfied:
        n.wait = replace(w, satisfied=True, timed_out=w.kind == WaitKind.SIGNAL)


def _continued(
    lookup: DefinitionLookup, n: WorkflowState, p: WorkflowContinuedAsNew, env: Envelope[Any]
) -> None:
    _close(n, WorkflowStatus.RUNNING)
    n.__dict__.update(continued(n, p, env).__dict__)
    n.memo = {}  # the parsed input of the old run must not be read as the new one's
    n.input_schema_version = lookup(n).input_schema_version


def _compensation_started(
    lookup: DefinitionLookup, n: WorkflowState, p: CompensationStarted, env: Envelope[Any]
) -> None:
    leave_state(n)
    n.wait = None
    n.take(steps_remaining=set())
    n.compensation = CompensationState(
        cause=p.cause, reason=p.reason, pending=tuple(json.loads(p.plan_json))
    )
    _remember(n, env)  # a cancel that began compensating: its redelivery writes nothing


def _ending(status: WorkflowStatus, field: str) -> Applier:
    """The applier of a terminal event: close the run, keep the event's text in ``field``."""

    def apply(lookup: DefinitionLookup, n: WorkflowState, p: Any, env: Envelope[Any]) -> None:
        _close(n, status)
        setattr(n, field, p.output_json if field == "output_json" else p.reason)

    return apply


def _stopped(status: WorkflowStatus) -> Applier:
    """The applier of a cancel's or a terminate's end: its reason kept, its command
    remembered (a redelivery writes nothing)."""

    def apply(
        lookup: DefinitionLookup,
        n: WorkflowState,
        p: WorkflowCancelled | WorkflowTerminated,
        env: Envelope[Any],
    ) -> None:
        _close(n, status)
        n.cancel_reason = p.reason
        _remember(n, env)

    return apply


#: One applier per event type: the only dispatch of evolve.
APPLIERS: dict[type, Applier] = {
    WorkflowStarted: _started_twice,
    StateEntered: _state_entered,
    ActivityScheduled: _scheduled,
    ActivityCompleted: _completed,
    ActivityFailed: _failed,
    TimerScheduled: _timer_scheduled,
    TimerFired: _timer_fired,
    ActivityHeartbeat: _heartbeat,
    ActivityTimedOut: _timed_out,
    ActivityDeadLettered: _dead_lettered,
    ActivityRedriven: _redriven,
    ActivityResolved: _resolved,
    WorkflowNeedsAttention: _needs_attention,
    WorkflowCompleted: _ending(WorkflowStatus.COMPLETED, "output_json"),
    WorkflowFailed: _ending(WorkflowStatus.FAILED, "failure_reason"),
    WorkflowCancelled: _stopped(WorkflowStatus.CANCELLED),
    WorkflowTerminated: _stopped(WorkflowStatus.TERMINATED),
    WorkflowContinuedAsNew: _continued,
    CompensationStarted: _compensation_started,
    WorkflowCompensated: _ending(WorkflowStatus.COMPENSATED, "failure_reason"),
    WorkflowCompensationFailed: _ending(WorkflowStatus.COMPENSATION_FAILED, "failure_reason"),
    **compensation.APPLIERS,
    **signals.APPLIERS,
    **human_tasks.APPLIERS,
    **migrations.APPLIERS,
    **refusals.APPLIERS,
    **fan_out.APPLIERS,
}


# -- helpers (on an owned scratch state) -------------------------------------------------


def _remember(n: WorkflowState, env: Envelope[Any]) -> None:
    if env.causation_id is not None:
        n.seen_commands = remember_command(n.seen_commands, env.causation_id)


def _activity(n: WorkflowState, activity_id: str) -> ActivityState:
    act = n.activities.get(activity_id)
    if act is None:
        raise HistoryError(f"workflow '{n.workflow_id}': unknown activity '{activity_id}'")
    return act


def _is_late(act: ActivityState, attempt: int) -> bool:
    """A report of an attempt that timed out (not the one the decider is settling)."""
    current = act.attempt == attempt and act.status in (_A.SCHEDULED, _A.RESOLVING)
    return not current and attempt in act.timed_out


def _record_late(n: WorkflowState, act: ActivityState, attempt: int) -> None:
    late = replace(act, timed_out=tuple(a for a in act.timed_out if a != attempt))
    n.mut_activities()[act.activity_id] = late


def _drop_activity_timers(
    n: WorkflowState, activity_id: str, kinds: Iterable[TimeoutKind] = tuple(TimeoutKind)
) -> None:
    """Disarm the timeout timers of ``activity_id`` (its attempt started or ended)."""
    if n.timers:
        for kind in kinds:
            n.drop_timer_for(str(TimerPurpose.activity_timeout(kind, activity_id)))


def _abandon_in_flight(n: WorkflowState) -> None:
    if n.in_flight:
        acts = n.mut_activities()
        for aid in n.in_flight:
            acts[aid] = replace(acts[aid], status=_A.CANCELLED)
        n.take(in_flight=set())


def _leave_wait(n: WorkflowState) -> None:
    """The current wait ends with its state: an open task closes, a correlated wait's
    correlation is remembered (a signal for it from now on is late)."""
    w = n.wait
    if w is not None and w.kind == WaitKind.HUMAN:
        human_tasks.close_open_task(n)
    elif w is not None:
        signals.close_correlation(n, w)


def leave_state(n: WorkflowState) -> None:
    """What leaving a state visit does: abandon its activities, end its wait, disarm
    its timers."""
    _abandon_in_flight(n)
    _leave_wait(n)
    n.clear_timers()


def _close(n: WorkflowState, status: WorkflowStatus) -> None:
    leave_state(n)
    n.status = status
