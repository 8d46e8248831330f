"""The workflow decider: ``decide(state, command) -> events`` and ``evolve(state, event)``.

Both are pure and deterministic. The only clock is ``command.recorded_at`` (epoch ms);
randomness (retry jitter) is a hash of recorded data, so replaying a history makes the
same decisions. ``decide`` works by *simulation*: it emits an event, folds it with
``evolve`` into a scratch state (copy-on-write, see :mod:`orchestrator.domain.state`)
and keeps going from there, so a single command can complete an activity, leave a
state, enter the next one and schedule its steps, and the events it returns are exactly
what ``evolve`` needs to rebuild the same state.

``evolve`` reads the definition in two places only: on ``StateEntered`` it learns the
state's step names and wait, so "all steps done", "the wait began" and "an inbox
signal was consumed" follow from the events without extra event types; on
``ActivityTimedOut`` it learns whether the step has a status query (the timeout then
leaves the outcome unknown).

Activity failures (DESIGN §7): a transient failure is retried (same idempotency key,
``attempt + 1``) after a jittered backoff timer while the step's RetryPolicy allows it
(``max_attempts``, ``max_elapsed``), then dead-lettered (``on_exhausted="dead_letter"``:
the run needs attention until a ``RedriveActivity``) or failed (``"fail"``: the state's
``on_failure`` path, else ``WorkflowFailed``). A permanent failure, or an error type in
``non_retryable``, takes the failure path at once. An unknown outcome of a step with a
``status_query`` runs that query first and never dispatches the write again before it
answers: found -> the step completes with the found result; not found -> retry the same
logical attempt; no answer -> ``WorkflowNeedsAttention`` until a ``ResolveActivity``.
Timeouts (schedule-to-start, start-to-close, heartbeat) are durable timers with purpose
``timeout:<kind>:<activity id>``; a late report of an attempt that timed out is recorded
once and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from orchestrator.definitions import (
    DEFAULT_RETRY,
    TIMEOUT_KINDS,
    Context,
    InvalidInputError,
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    UnknownWorkflowError,
    WorkflowDefinition,
    canonical_json,
    duration_ms,
    format_validation_error,
    index_definitions,
    resolve_definition,
)
from orchestrator.domain.keys import idempotency_key
from orchestrator.domain.messages import (
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityHeartbeat,
    ActivityRedriven,
    ActivityResolved,
    ActivityScheduled,
    ActivityTimedOut,
    CancelWorkflow,
    CompleteActivity,
    Envelope,
    Event,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    RedriveActivity,
    ResolveActivity,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowNeedsAttention,
    WorkflowStarted,
)
from orchestrator.domain.state import (
    ATTENTION,
    CANCELLED,
    COMPLETED,
    FAILED,
    NEEDS_ATTENTION,
    RUNNING,
    WAITING,
    ActivityState,
    TimerState,
    WaitState,
    WorkflowState,
)

__all__ = [
    "FAILURE_CLASSES",
    "MAX_TRANSITIONS_PER_DECISION",
    "QUERY_RETRY",
    "RESOLUTIONS",
    "TIMEOUT_ERROR_TYPES",
    "CommandRejected",
    "Decider",
    "HistoryError",
    "retry_delay_ms",
]

FAILURE_CLASSES = ("transient", "permanent", "unknown")
#: What an operator may say about an activity whose outcome stayed unknown.
RESOLUTIONS = ("found", "not_found", "failed")
#: Retries of a status query's own transient failures.
QUERY_RETRY = DEFAULT_RETRY
#: ``error_type`` recorded for each kind of timeout (``non_retryable`` may name them).
TIMEOUT_ERROR_TYPES = {
    "schedule_to_start": "ScheduleToStartTimeout",
    "start_to_close": "StartToCloseTimeout",
    "heartbeat": "HeartbeatTimeout",
}
_QUERY_SEP = "/query/"
#: Guards against a loop of states that neither run a step nor wait.
MAX_TRANSITIONS_PER_DECISION = 1000


#: The only events ``Decider.summarize`` reads (a rebuild decodes just these for a finished run).
SUMMARY_EVENTS: tuple[type, ...] = (
    WorkflowStarted,
    StateEntered,
    SignalReceived,
    ActivityResolved,
    ActivityRedriven,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
)


class CommandRejected(Exception):
    """A command that must not change the workflow; the message is a one-line reason."""


class HistoryError(ValueError):
    """An event that cannot follow the state it is folded into (corrupt or foreign history)."""


def retry_delay_ms(policy: RetryPolicy, workflow_id: str, activity_id: str, attempt: int) -> int:
    """Full-jitter backoff after failed ``attempt``: uniform in [0, cap], from a hash.

    The hash covers the workflow id too, so runs of one definition do not retry in lockstep.
    """
    cap = policy.backoff_cap_ms(attempt)
    digest = hashlib.sha256(f"{workflow_id}\x00{activity_id}\x00{attempt}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") * (cap + 1)) >> 64


def _describe(payload: Any) -> str:
    if isinstance(payload, SignalWorkflow):
        return f"signal '{payload.signal_name}'"
    if isinstance(payload, CancelWorkflow):
        return "cancel"
    if isinstance(payload, CompleteActivity):
        return f"completion of activity '{payload.activity_id}'"
    if isinstance(payload, FailActivity):
        return f"failure of activity '{payload.activity_id}'"
    if isinstance(payload, FireTimer):
        return f"timer '{payload.timer_id}'"
    if isinstance(payload, HeartbeatActivity):
        return f"heartbeat of activity '{payload.activity_id}'"
    if isinstance(payload, ResolveActivity):
        return f"resolution of activity '{payload.activity_id}'"
    if isinstance(payload, RedriveActivity):
        return f"redrive of activity '{payload.activity_id}'"
    return type(payload).__name__


def activity_timeout(purpose: str) -> tuple[str, str] | None:
    """``(kind, activity_id)`` of an activity timeout timer's purpose, else None.

    Purposes are ``timeout:<kind>:<activity id>``; a signal wait's timeout is
    ``timeout:<signal>`` and signal names hold no ``:``, so the two never mix.
    """
    if not purpose.startswith("timeout:"):
        return None
    kind, sep, aid = purpose[len("timeout:") :].partition(":")
    if not sep or kind not in TIMEOUT_KINDS:
        return None
    return kind, aid


def query_outcome(result_json: str) -> tuple[bool | None, Any, str]:
    """A status query's answer: ``(True, result, "")``, ``(False, None, "")`` or
    ``(None, None, why)`` when it is not ``{"found": true|false, ...}``."""
    try:
        data = json.loads(result_json)
    except ValueError as exc:
        return None, None, f"not JSON: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("found"), bool):
        return None, None, 'expected {"found": true, "result": ...} or {"found": false}'
    if data["found"]:
        return True, data.get("result"), ""
    return False, None, ""


def _label(act: ActivityState) -> str:
    return f"step '{act.step}' ({act.activity_type})"


class _UserCodeFailed(Exception):
    """A definition function raised: deterministic, so the workflow fails with the reason."""


class Decider:
    """The one deterministic decider compiled from a set of workflow definitions."""

    def __init__(
        self,
        definitions: Iterable[WorkflowDefinition] | Mapping[tuple[str, int], WorkflowDefinition],
    ) -> None:
        defs = definitions.values() if isinstance(definitions, Mapping) else definitions
        self.definitions = index_definitions(defs)

    # -- public API -----------------------------------------------------------------

    def decide(self, state: WorkflowState | None, command: Envelope[Any]) -> list[Event]:
        """The events ``command`` causes (``[]`` for duplicates); raises CommandRejected."""
        return [env.payload for env in self._run(state, command, command.recorded_at)[1]]

    def handle(
        self, state: WorkflowState | None, command: Envelope[Any], now_ms: int
    ) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        """Decide, wrap each event in its envelope (recorded at ``now_ms``) and fold them."""
        return self._run(state, command, now_ms)

    def evolve(self, state: WorkflowState | None, event: Envelope[Any]) -> WorkflowState:
        """Fold one event; an event at or below ``state.seq`` is already in and is ignored."""
        p = event.payload
        if state is None:
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
            )
        if event.seq <= state.seq:
            return state
        if event.seq != state.seq + 1:
            raise HistoryError(
                f"workflow '{state.workflow_id}': event seq {event.seq} after {state.seq} (gap)"
            )
        if state.is_terminal:
            raise HistoryError(
                f"workflow '{state.workflow_id}': {event.type} after the run {state.status}"
            )
        apply = self._appliers.get(type(p))
        if apply is None:
            raise HistoryError(f"workflow '{state.workflow_id}': {event.type} is not an event")
        n = state.clone()
        n.seq = event.seq
        n.updated_at = event.recorded_at
        apply(self, n, p, event)
        if n.status not in (COMPLETED, FAILED, CANCELLED):
            w = n.wait
            if n.in_flight and any(n.activities[a].status in ATTENTION for a in n.in_flight):
                n.status = NEEDS_ATTENTION
            elif w is not None and not n.steps_remaining and not w.satisfied:
                n.status = WAITING
            else:
                n.status = RUNNING
        return n

    def fold(
        self, events: Iterable[Envelope[Any]], state: WorkflowState | None = None
    ) -> WorkflowState | None:
        """Fold a history (or its tail after a snapshot) into a state."""
        for env in events:
            state = self.evolve(state, env)
        return state

    def summarize(
        self, base: WorkflowState | None, events: Iterable[Envelope[Any]]
    ) -> WorkflowState:
        """The :meth:`WorkflowState.summary` of a finished run, without folding its history.

        ``events`` are the run's events after ``base`` (or from ``WorkflowStarted`` when
        ``base`` is None), of which only these are needed, in order: ``WorkflowStarted``,
        the last ``StateEntered``, every ``SignalReceived``, ``ActivityResolved`` and
        ``ActivityRedriven`` (their commands are remembered) and the terminal event. Used
        to rebuild finished runs quickly; equal to ``fold(all).summary()`` (tested).
        """
        it = iter(events)
        state = base
        if state is None:
            first = next(it)
            state = self.evolve(None, first)
        current, seen = state.current_state, state.seen_commands
        end: Envelope[Any] | None = None
        for env in it:
            if env.seq <= state.seq:
                continue
            p = env.payload
            if isinstance(p, StateEntered):
                current = p.state
            elif (
                isinstance(p, SignalReceived | ActivityResolved | ActivityRedriven)
                and env.causation_id is not None
            ):
                seen = seen | {env.causation_id}
            elif isinstance(p, WorkflowCompleted | WorkflowFailed | WorkflowCancelled):
                end = env
        if end is None:
            raise HistoryError(f"workflow '{state.workflow_id}': no terminal event to summarize")
        p = end.payload
        done = state.clone()
        done.seq, done.updated_at, done.current_state = end.seq, end.recorded_at, current
        done.seen_commands = seen
        if isinstance(p, WorkflowCompleted):
            done.status, done.output_json = COMPLETED, p.output_json
        elif isinstance(p, WorkflowFailed):
            done.status, done.failure_reason = FAILED, p.reason
        else:
            done.status, done.cancel_reason = CANCELLED, p.reason
            if end.causation_id is not None:
                done.seen_commands = seen | {end.causation_id}
        return done.summary()

    def definition_for(self, state: WorkflowState) -> WorkflowDefinition:
        found = self.definitions.get((state.name, state.version))
        if found is None:
            raise HistoryError(
                f"workflow '{state.workflow_id}' runs '{state.name}' v{state.version}, "
                "which this application does not define"
            )
        return found

    # -- deciding -------------------------------------------------------------------

    def _run(
        self, state: WorkflowState | None, cmd: Envelope[Any], now_ms: int
    ) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        p = cmd.payload
        wid = cmd.workflow_id
        if isinstance(p, StartWorkflow):
            if state is not None:
                return state, []
            try:
                defn = resolve_definition(self.definitions, p.name, p.version)
                defn.parse_input(p.input_json)
            except (UnknownWorkflowError, InvalidInputError) as exc:
                raise CommandRejected(str(exc)) from None
            run = _Run(self, defn, None, cmd, now_ms, cmd.message_id)
            run.emit(WorkflowStarted(defn.name, defn.version, defn.digest, p.input_json))
            run.enter(defn.initial)
            run.advance()
            return run.state, run.envs

        what = _describe(p)
        if state is None:
            raise CommandRejected(f"workflow '{wid}' does not exist; {what} refused")
        if state.workflow_id != wid:
            raise CommandRejected(
                f"command for workflow '{wid}' given the state of '{state.workflow_id}'"
            )
        try:
            defn = self.definition_for(state)
        except HistoryError as exc:
            raise CommandRejected(f"{exc}; {what} refused") from None
        run = _Run(self, defn, state, cmd, now_ms, state.run_id)
        if isinstance(p, CompleteActivity):
            run.on_complete(p)
        elif isinstance(p, FailActivity):
            run.on_fail(p)
        elif isinstance(p, FireTimer):
            run.on_timer(p)
        elif isinstance(p, SignalWorkflow):
            run.on_signal(p)
        elif isinstance(p, CancelWorkflow):
            run.on_cancel(p)
        elif isinstance(p, HeartbeatActivity):
            run.on_heartbeat(p)
        elif isinstance(p, ResolveActivity):
            run.on_resolve(p)
        elif isinstance(p, RedriveActivity):
            run.on_redrive(p)
        else:
            raise CommandRejected(f"{type(p).__name__} is not a workflow command")
        return run.state, run.envs

    # -- evolving -------------------------------------------------------------------

    def _ev_started(self, n: WorkflowState, p: WorkflowStarted, env: Envelope[Any]) -> None:
        raise HistoryError(f"workflow '{n.workflow_id}': WorkflowStarted twice")

    def _ev_state_entered(self, n: WorkflowState, p: StateEntered, env: Envelope[Any]) -> None:
        defn = self.definition_for(n)
        st = defn.states.get(p.state)
        if st is None:
            raise HistoryError(f"{defn.label} has no state '{p.state}'")
        _abandon_in_flight(n)
        if n.timers:
            n.timers = {}
        n.current_state = p.state
        n.visit = p.visit
        n.visits = {**n.visits, p.state: p.visit}
        n.steps_remaining = frozenset(s.name for s in st.steps)
        if isinstance(st.wait, SignalWait):
            n.wait = WaitState(kind="signal", signal_name=st.wait.name)
        elif isinstance(st.wait, TimerWait):
            n.wait = WaitState(kind="timer")
        else:
            n.wait = None
        if not n.steps_remaining:
            _begin_wait(n)

    def _ev_scheduled(self, n: WorkflowState, p: ActivityScheduled, env: Envelope[Any]) -> None:
        aid = p.activity_id
        old = n.activities.get(aid)
        acts = dict(n.activities)
        if old is None:
            parent = aid[: aid.index(_QUERY_SEP)] if _QUERY_SEP in aid else None
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
                acts[parent] = replace(acts[parent], status="querying")
                n.in_flight = n.in_flight | {parent}
        else:
            acts[aid] = replace(
                old,
                status="scheduled",
                attempt=p.attempt,
                logical_attempt=p.logical_attempt,
                idempotency_key=p.idempotency_key,
                heartbeats=frozenset(),
            )
            _drop_activity_timers(n, aid)
        n.activities = acts
        n.in_flight = n.in_flight | {aid}
        if n.logical_attempts.get(p.activity_type, 0) < p.logical_attempt:
            n.logical_attempts = {**n.logical_attempts, p.activity_type: p.logical_attempt}

    def _ev_completed(self, n: WorkflowState, p: ActivityCompleted, env: Envelope[Any]) -> None:
        act = _activity(n, p.activity_id)
        if _is_late(act, p.attempt):
            _record_late(n, act, p.attempt)
            return
        act = replace(
            act,
            status="completed",
            attempt=p.attempt,
            result_json=p.result_json,
            heartbeats=frozenset(),
        )
        acts = {**n.activities, p.activity_id: act}
        n.in_flight = n.in_flight - {p.activity_id}
        _drop_activity_timers(n, p.activity_id)
        if act.parent is not None:  # a status query answered
            par = acts[act.parent]
            if par.status == "querying":
                found = query_outcome(p.result_json)[0]
                if found:
                    acts[act.parent] = replace(par, status="resolving")
                else:  # the effect did not happen (or the answer is unusable)
                    acts[act.parent] = replace(par, status="failed")
                    n.in_flight = n.in_flight - {act.parent}
            n.activities = acts
            return
        n.activities = acts
        n.step_results = {**n.step_results, act.step: p.result_json}
        if act.state == n.current_state and act.visit == n.visit and act.step in n.steps_remaining:
            n.steps_remaining = n.steps_remaining - {act.step}
            if not n.steps_remaining:
                _begin_wait(n)

    def _ev_failed(self, n: WorkflowState, p: ActivityFailed, env: Envelope[Any]) -> None:
        old = _activity(n, p.activity_id)
        if _is_late(old, p.attempt):
            _record_late(n, old, p.attempt)
            return
        act = replace(
            old,
            status="failed",
            attempt=p.attempt,
            failure_class=p.failure_class,
            error_type=p.error_type,
            error_message=p.message,
            heartbeats=frozenset(),
        )
        n.activities = {**n.activities, p.activity_id: act}
        n.in_flight = n.in_flight - {p.activity_id}
        _drop_activity_timers(n, p.activity_id)

    def _ev_heartbeat(self, n: WorkflowState, p: ActivityHeartbeat, env: Envelope[Any]) -> None:
        act = _activity(n, p.activity_id)
        if act.status != "scheduled" or act.attempt != p.attempt:
            raise HistoryError(
                f"workflow '{n.workflow_id}': heartbeat of activity '{p.activity_id}' attempt "
                f"{p.attempt}, which is not running"
            )
        first = not act.heartbeats
        hid = env.causation_id or env.message_id
        n.activities = {
            **n.activities,
            p.activity_id: replace(act, heartbeats=act.heartbeats | {hid}),
        }
        if first:  # the attempt started: schedule-to-start no longer applies
            _drop_activity_timers(n, p.activity_id, ("schedule_to_start",))

    def _ev_timed_out(self, n: WorkflowState, p: ActivityTimedOut, env: Envelope[Any]) -> None:
        act = _activity(n, p.activity_id)
        step = self.definition_for(n).steps_by_name.get(act.step)
        unknown = (
            p.timeout != "schedule_to_start"
            and act.parent is None
            and step is not None
            and step.status_query is not None
        )
        act = replace(
            act,
            status="failed",
            attempt=p.attempt,
            failure_class="unknown" if unknown else "transient",
            error_type=TIMEOUT_ERROR_TYPES.get(p.timeout, "Timeout"),
            error_message=f"{p.timeout} timeout expired",
            heartbeats=frozenset(),
            timed_out=(*act.timed_out, p.attempt),
        )
        n.activities = {**n.activities, p.activity_id: act}
        n.in_flight = n.in_flight - {p.activity_id}
        _drop_activity_timers(n, p.activity_id)

    def _ev_dead_lettered(
        self, n: WorkflowState, p: ActivityDeadLettered, env: Envelope[Any]
    ) -> None:
        act = replace(_activity(n, p.activity_id), status="dead_lettered")
        n.activities = {**n.activities, p.activity_id: act}
        n.in_flight = n.in_flight | {p.activity_id}

    def _ev_needs_attention(
        self, n: WorkflowState, p: WorkflowNeedsAttention, env: Envelope[Any]
    ) -> None:
        act = replace(_activity(n, p.activity_id), status="attention")
        n.activities = {**n.activities, p.activity_id: act}
        n.in_flight = n.in_flight | {p.activity_id}

    def _ev_redriven(self, n: WorkflowState, p: ActivityRedriven, env: Envelope[Any]) -> None:
        act = _activity(n, p.activity_id)
        # a fresh budget: max_attempts more attempts, max_elapsed from now
        act = replace(
            act, status="resolving", budget_base=act.attempt, first_dispatch_at=env.recorded_at
        )
        n.activities = {**n.activities, p.activity_id: act}
        n.in_flight = n.in_flight | {p.activity_id}
        if env.causation_id is not None:
            n.seen_commands = n.seen_commands | {env.causation_id}

    def _ev_resolved(self, n: WorkflowState, p: ActivityResolved, env: Envelope[Any]) -> None:
        act = _activity(n, p.activity_id)
        if p.resolution == "failed":
            act = replace(
                act,
                status="failed",
                failure_class="unknown",
                error_type="OutcomeUnknown",
                error_message=p.reason,
            )
            n.in_flight = n.in_flight - {p.activity_id}
        elif p.resolution == "not_found":  # retried now, with a fresh budget
            act = replace(
                act, status="resolving", budget_base=act.attempt, first_dispatch_at=env.recorded_at
            )
        else:
            act = replace(act, status="resolving")
        n.activities = {**n.activities, p.activity_id: act}
        if env.causation_id is not None:
            n.seen_commands = n.seen_commands | {env.causation_id}

    def _ev_timer_scheduled(self, n: WorkflowState, p: TimerScheduled, env: Envelope[Any]) -> None:
        if activity_timeout(p.purpose) is not None:  # re-armed: replaces the older timer
            n.timers = {k: v for k, v in n.timers.items() if v.purpose != p.purpose}
        n.timers = {**n.timers, p.timer_id: TimerState(p.fire_at, p.purpose)}
        if p.purpose.startswith("retry:"):
            aid = p.purpose[len("retry:") :]
            n.activities = {**n.activities, aid: replace(_activity(n, aid), status="backoff")}
            n.in_flight = n.in_flight | {aid}
        elif activity_timeout(p.purpose) is not None:
            pass
        elif n.wait is not None and (p.purpose == "wait" or p.purpose.startswith("timeout:")):
            n.wait = replace(n.wait, timer_id=p.timer_id)

    def _ev_timer_fired(self, n: WorkflowState, p: TimerFired, env: Envelope[Any]) -> None:
        timer = n.timers.get(p.timer_id)
        if timer is None:
            raise HistoryError(f"workflow '{n.workflow_id}': timer '{p.timer_id}' is not armed")
        n.timers = {k: v for k, v in n.timers.items() if k != p.timer_id}
        w = n.wait
        if w is not None and w.timer_id == p.timer_id and not w.satisfied:
            n.wait = replace(w, satisfied=True, timed_out=w.kind == "signal")

    def _ev_signal(self, n: WorkflowState, p: SignalReceived, env: Envelope[Any]) -> None:
        n.signals = {
            **n.signals,
            p.signal_name: (*n.signals.get(p.signal_name, ()), p.payload_json),
        }
        if env.causation_id is not None:
            n.seen_commands = n.seen_commands | {env.causation_id}
        w = n.wait
        if (
            w is not None
            and w.kind == "signal"
            and w.signal_name == p.signal_name
            and not w.satisfied
            and not n.steps_remaining
        ):
            _satisfy_signal_wait(n, w, p.payload_json)
        else:
            n.inbox = (*n.inbox, (p.signal_name, p.payload_json))

    def _ev_completed_wf(self, n: WorkflowState, p: WorkflowCompleted, env: Envelope[Any]) -> None:
        _close(n, COMPLETED)
        n.output_json = p.output_json

    def _ev_failed_wf(self, n: WorkflowState, p: WorkflowFailed, env: Envelope[Any]) -> None:
        _close(n, FAILED)
        n.failure_reason = p.reason

    def _ev_cancelled_wf(self, n: WorkflowState, p: WorkflowCancelled, env: Envelope[Any]) -> None:
        _close(n, CANCELLED)
        n.cancel_reason = p.reason
        if env.causation_id is not None:
            n.seen_commands = n.seen_commands | {env.causation_id}

    _appliers: dict[type, Callable[[Decider, WorkflowState, Any, Envelope[Any]], None]] = {
        WorkflowStarted: _ev_started,
        StateEntered: _ev_state_entered,
        ActivityScheduled: _ev_scheduled,
        ActivityCompleted: _ev_completed,
        ActivityFailed: _ev_failed,
        TimerScheduled: _ev_timer_scheduled,
        TimerFired: _ev_timer_fired,
        SignalReceived: _ev_signal,
        ActivityHeartbeat: _ev_heartbeat,
        ActivityTimedOut: _ev_timed_out,
        ActivityDeadLettered: _ev_dead_lettered,
        ActivityRedriven: _ev_redriven,
        ActivityResolved: _ev_resolved,
        WorkflowNeedsAttention: _ev_needs_attention,
        WorkflowCompleted: _ev_completed_wf,
        WorkflowFailed: _ev_failed_wf,
        WorkflowCancelled: _ev_cancelled_wf,
    }


# -- evolve helpers (operate on a fresh clone) --------------------------------------


def _activity(n: WorkflowState, activity_id: str) -> ActivityState:
    act = n.activities.get(activity_id)
    if act is None:
        raise HistoryError(f"workflow '{n.workflow_id}': unknown activity '{activity_id}'")
    return act


def _is_late(act: ActivityState, attempt: int) -> bool:
    """A report of an attempt that timed out (not the one the decider is settling)."""
    current = act.attempt == attempt and act.status in ("scheduled", "resolving")
    return not current and attempt in act.timed_out


def _record_late(n: WorkflowState, act: ActivityState, attempt: int) -> None:
    late = replace(act, timed_out=tuple(a for a in act.timed_out if a != attempt))
    n.activities = {**n.activities, act.activity_id: late}


def _drop_activity_timers(
    n: WorkflowState, activity_id: str, kinds: tuple[str, ...] = TIMEOUT_KINDS
) -> None:
    """Disarm the timeout timers of ``activity_id`` (its attempt started or ended)."""
    if not n.timers:
        return
    purposes = {f"timeout:{kind}:{activity_id}" for kind in kinds}
    if any(t.purpose in purposes for t in n.timers.values()):
        n.timers = {k: v for k, v in n.timers.items() if v.purpose not in purposes}


def _abandon_in_flight(n: WorkflowState) -> None:
    if n.in_flight:
        acts = dict(n.activities)
        for aid in n.in_flight:
            acts[aid] = replace(acts[aid], status="cancelled")
        n.activities = acts
        n.in_flight = frozenset()


def _begin_wait(n: WorkflowState) -> None:
    """All steps of the visit are done: a signal wait consumes the oldest matching signal."""
    w = n.wait
    if w is None or w.kind != "signal" or w.satisfied:
        return
    for i, (name, payload) in enumerate(n.inbox):
        if name == w.signal_name:
            n.inbox = n.inbox[:i] + n.inbox[i + 1 :]
            _satisfy_signal_wait(n, w, payload)
            return


def _satisfy_signal_wait(n: WorkflowState, w: WaitState, payload_json: str) -> None:
    n.wait = replace(w, satisfied=True, payload_json=payload_json)
    if w.timer_id is not None and w.timer_id in n.timers:  # the timeout is cancelled
        n.timers = {k: v for k, v in n.timers.items() if k != w.timer_id}


def _close(n: WorkflowState, status: str) -> None:
    _abandon_in_flight(n)
    n.timers = {}
    n.status = status


# -- one decision ---------------------------------------------------------------------


class _Run:
    """The events of one command, folded into a scratch state as they are emitted."""

    __slots__ = ("_correlation", "cmd", "decider", "defn", "envs", "now_ms", "run_id", "state")

    def __init__(
        self,
        decider: Decider,
        defn: WorkflowDefinition,
        state: WorkflowState | None,
        cmd: Envelope[Any],
        now_ms: int,
        run_id: str,
    ) -> None:
        self.decider = decider
        self.defn = defn
        self.state = state
        self.cmd = cmd
        self.now_ms = now_ms
        self.run_id = run_id
        self.envs: list[Envelope[Any]] = []
        self._correlation = cmd.correlation_id or cmd.workflow_id

    @property
    def s(self) -> WorkflowState:
        assert self.state is not None
        return self.state

    def emit(self, payload: Event) -> None:
        seq = (self.state.seq if self.state is not None else 0) + 1
        env: Envelope[Any] = Envelope(
            message_id=f"{self.run_id}/{seq}",
            workflow_id=self.cmd.workflow_id,
            run_id=self.run_id,
            seq=seq,
            type=type(payload).__name__,
            recorded_at=self.now_ms,
            payload=payload,
            causation_id=self.cmd.message_id,
            correlation_id=self._correlation,
            traceparent=self.cmd.traceparent,
        )
        self.envs.append(env)
        self.state = self.decider.evolve(self.state, env)

    # -- commands ---------------------------------------------------------------------

    def _report(self, activity_id: str, attempt: int) -> tuple[ActivityState | None, bool]:
        """The activity a worker reports on and whether the report is late.

        ``(act, False)``: the report of the current attempt; ``(act, True)``: a late
        report of an attempt that timed out (recorded once, decides nothing); ``(None,
        False)``: a duplicate or stale report, which writes nothing.
        """
        s = self.s
        if s.is_terminal:
            return None, False
        act = s.activities.get(activity_id)
        if act is None:
            return None, False
        if act.status == "scheduled" and act.attempt == attempt:
            return act, False
        if attempt in act.timed_out:
            return act, True
        return None, False

    def on_complete(self, p: CompleteActivity) -> None:
        act, late = self._report(p.activity_id, p.attempt)
        if act is None:
            return
        try:
            json.loads(p.result_json)
        except ValueError as exc:
            raise CommandRejected(
                f"result of activity '{p.activity_id}' is not valid JSON: {exc}"
            ) from None
        self.emit(ActivityCompleted(p.activity_id, p.attempt, p.result_json))
        if late:
            return
        if act.parent is not None:
            self._query_answered(act, p.result_json)
        else:
            self.advance()

    def on_fail(self, p: FailActivity) -> None:
        act, late = self._report(p.activity_id, p.attempt)
        if act is None:
            return
        if p.failure_class not in FAILURE_CLASSES:
            raise CommandRejected(
                f"failure_class of activity '{p.activity_id}' must be one of "
                f"{', '.join(FAILURE_CLASSES)}; got '{p.failure_class}'"
            )
        self.emit(
            ActivityFailed(p.activity_id, p.attempt, p.failure_class, p.error_type, p.message)
        )
        if late:
            return
        if act.parent is not None:
            self._query_failed(self.s.activities[act.activity_id])
        else:
            self._after_failure(self.s.activities[act.activity_id])

    def on_heartbeat(self, p: HeartbeatActivity) -> None:
        s = self.s
        if s.is_terminal:
            return
        act = s.activities.get(p.activity_id)
        if act is None or act.status != "scheduled" or act.attempt != p.attempt:
            return  # stale: the attempt ended, timed out or was never sent
        if self.cmd.message_id in act.heartbeats:
            return  # redelivered
        if p.details_json:
            try:
                json.loads(p.details_json)
            except ValueError as exc:
                raise CommandRejected(
                    f"heartbeat details of activity '{p.activity_id}' are not valid JSON: {exc}"
                ) from None
        first = not act.heartbeats
        self.emit(ActivityHeartbeat(p.activity_id, p.attempt, p.details_json))
        step = self._step(act)
        if step is None:
            return
        now = self.cmd.recorded_at
        s2c = step.timeout_ms("start_to_close")
        if first and s2c is not None and step.report_start:
            self._arm_timeout(act.activity_id, "start_to_close", f"{p.attempt}", now + s2c)
        hb = step.timeout_ms("heartbeat")
        if hb is not None:
            count = len(act.heartbeats) + 1
            self._arm_timeout(act.activity_id, "heartbeat", f"{p.attempt}/{count}", now + hb)

    def on_resolve(self, p: ResolveActivity) -> None:
        s = self.s
        if self.cmd.message_id in s.seen_commands:
            return
        what = f"resolution of activity '{p.activity_id}'"
        if s.is_terminal:
            raise CommandRejected(f"workflow '{s.workflow_id}' is {s.status}; {what} refused")
        if p.resolution not in RESOLUTIONS:
            raise CommandRejected(
                f"resolution of activity '{p.activity_id}' must be one of "
                f"{', '.join(RESOLUTIONS)}; got '{p.resolution}'"
            )
        act = self._operator_target(p.activity_id, "attention", what)
        if p.resolution == "found":
            try:
                json.loads(p.result_json)
            except ValueError as exc:
                raise CommandRejected(
                    f"result of activity '{p.activity_id}' is not valid JSON: {exc}"
                ) from None
        self.emit(ActivityResolved(p.activity_id, p.resolution, p.reason))
        if p.resolution == "found":
            self.emit(ActivityCompleted(act.activity_id, act.attempt, p.result_json))
            self.advance()
        elif p.resolution == "not_found":
            self._dispatch_again(self.s.activities[act.activity_id])
        else:
            self._fail_step(
                act,
                f"{_label(act)} failed: its outcome stayed unknown and an operator resolved it "
                f"as failed: {p.reason}",
            )

    def on_redrive(self, p: RedriveActivity) -> None:
        s = self.s
        if self.cmd.message_id in s.seen_commands:
            return
        what = f"redrive of activity '{p.activity_id}'"
        if s.is_terminal:
            raise CommandRejected(f"workflow '{s.workflow_id}' is {s.status}; {what} refused")
        act = self._operator_target(p.activity_id, "dead_lettered", what)
        self.emit(ActivityRedriven(act.activity_id))
        self._dispatch_again(self.s.activities[act.activity_id])

    def _operator_target(self, activity_id: str, status: str, what: str) -> ActivityState:
        s = self.s
        act = s.activities.get(activity_id)
        if act is None:
            raise CommandRejected(
                f"workflow '{s.workflow_id}' has no activity '{activity_id}'; {what} refused"
            )
        if act.status != status:
            need = "awaiting resolution" if status == "attention" else "dead-lettered"
            hint = ""
            if act.status in ATTENTION:
                hint = " (use redrive)" if act.status == "dead_lettered" else " (use resolve)"
            raise CommandRejected(
                f"activity '{activity_id}' of workflow '{s.workflow_id}' is not {need}, it is "
                f"{act.status}{hint}; {what} refused"
            )
        return act

    def on_timer(self, p: FireTimer) -> None:
        s = self.s
        if s.is_terminal:
            return
        timer = s.timers.get(p.timer_id)
        if timer is None:
            return
        self.emit(TimerFired(p.timer_id))
        timeout = activity_timeout(timer.purpose)
        if timer.purpose.startswith("retry:"):
            self._dispatch_again(self.s.activities[timer.purpose[len("retry:") :]])
        elif timeout is not None:
            kind, aid = timeout
            act = self.s.activities[aid]
            self.emit(ActivityTimedOut(aid, act.attempt, kind))
            self._after_failure(self.s.activities[aid])
        else:
            self.advance()

    def on_signal(self, p: SignalWorkflow) -> None:
        s = self.s
        wid = s.workflow_id
        if self.cmd.message_id in s.seen_commands:
            return
        if s.is_terminal:
            raise CommandRejected(
                f"workflow '{wid}' is {s.status}; signal '{p.signal_name}' refused"
            )
        if p.signal_name not in self.defn.signal_names:
            known = ", ".join(sorted(self.defn.signal_names)) or "(none)"
            raise CommandRejected(
                f"workflow '{wid}' ({self.defn.name} v{self.defn.version}) does not wait for "
                f"signal '{p.signal_name}'; known signals: {known}"
            )
        try:
            json.loads(p.payload_json)
        except ValueError as exc:
            raise CommandRejected(
                f"payload of signal '{p.signal_name}' is not valid JSON: {exc}"
            ) from None
        self.emit(SignalReceived(p.signal_name, p.payload_json))
        self.advance()

    def on_cancel(self, p: CancelWorkflow) -> None:
        s = self.s
        if self.cmd.message_id in s.seen_commands:
            return
        if s.is_terminal:
            raise CommandRejected(f"workflow '{s.workflow_id}' is {s.status}; cancel refused")
        self.emit(WorkflowCancelled(p.reason))

    # -- the state machine -------------------------------------------------------------

    def enter(self, name: str) -> None:
        self.emit(StateEntered(name, self.s.visits.get(name, 0) + 1))

    def _call(self, fn: Callable[[Context], Any], what: str) -> Any:
        try:
            return fn(Context(self.defn, self.s))
        except Exception as exc:  # user code: deterministic, so the run fails with it
            raise _UserCodeFailed(
                f"state '{self.s.current_state}': {what} raised {type(exc).__name__}: {exc}"
            ) from None

    def advance(self) -> None:
        """Run the current state forward until it needs an outside report or ends."""
        try:
            self._advance()
        except _UserCodeFailed as exc:
            self.emit(WorkflowFailed(str(exc)))

    def _advance(self) -> None:
        for _ in range(MAX_TRANSITIONS_PER_DECISION):
            s = self.s
            if s.is_terminal:
                return
            st = self.defn.states[s.current_state or ""]
            if s.steps_remaining:
                self._schedule_ready(st)
                return
            w = s.wait
            if w is not None and not w.satisfied:
                if w.timer_id is None:
                    self._arm_wait_timer(st)
                return
            if w is not None and w.timed_out:
                assert isinstance(st.wait, SignalWait)
                target = st.wait.on_timeout
                if target is None:
                    self.emit(
                        WorkflowFailed(
                            f"state '{st.name}': timed out waiting for signal '{st.wait.name}'"
                        )
                    )
                    return
            else:
                target = self._choose(st)
                if target is None:
                    self._finish(st)
                    return
            self.enter(target)
        self.emit(
            WorkflowFailed(
                f"more than {MAX_TRANSITIONS_PER_DECISION} state transitions in one decision "
                f"(last state '{self.s.current_state}'): a loop without a step or a wait"
            )
        )

    def _schedule_ready(self, st: State) -> None:
        s = self.s
        prefix = f"{st.name}#{s.visit}/"
        ctx: Context | None = None
        for step in self.defn.step_order[st.name]:
            aid = prefix + step.name
            if aid in s.activities:
                continue
            deps = (s.activities.get(prefix + d) for d in step.after)
            if not all(a is not None and a.status == "completed" for a in deps):
                continue
            if step.input is None:
                ctx = ctx or Context(self.defn, s)
                input_json = canonical_json(ctx.input_dict)
            else:
                value = self._call(step.input, f"input of step '{step.name}'")
                try:
                    input_json = canonical_json(value)
                except (TypeError, ValueError) as exc:
                    raise _UserCodeFailed(
                        f"state '{st.name}': input of step '{step.name}' is not JSON: {exc}"
                    ) from None
            logical = self.s.logical_attempts.get(step.activity, 0) + 1
            self._dispatch(
                step,
                step.name,
                aid,
                step.activity,
                input_json,
                logical,
                1,
                idempotency_key(s.workflow_id, step.activity, logical),
            )

    # -- activity attempts, failures and the operator's way out --------------------------

    def _step(self, act: ActivityState) -> Step | None:
        """The step whose timeouts and policy govern ``act`` (None for a status query)."""
        if act.parent is not None:
            return None
        return self.defn.steps_by_name.get(act.step)

    def _dispatch(
        self,
        step: Step | None,
        step_name: str,
        activity_id: str,
        activity_type: str,
        input_json: str,
        logical_attempt: int,
        attempt: int,
        key: str,
    ) -> None:
        """Send one attempt and arm the timeouts that run from its dispatch."""
        self.emit(
            ActivityScheduled(
                activity_id=activity_id,
                activity_type=activity_type,
                step=step_name,
                input_json=input_json,
                logical_attempt=logical_attempt,
                attempt=attempt,
                idempotency_key=key,
                heartbeat_ms=step.heartbeat_ms if step is not None else 0,
                report_start=step.report_start if step is not None else False,
            )
        )
        if step is None:
            return
        now = self.cmd.recorded_at
        s2s = step.timeout_ms("schedule_to_start")
        if s2s is not None:
            self._arm_timeout(activity_id, "schedule_to_start", f"{attempt}", now + s2s)
        s2c = step.timeout_ms("start_to_close")
        if s2c is not None and not step.report_start:
            self._arm_timeout(activity_id, "start_to_close", f"{attempt}", now + s2c)

    def _dispatch_again(self, act: ActivityState) -> None:
        """The next physical attempt of the same logical attempt (same idempotency key)."""
        self._dispatch(
            self._step(act),
            act.step,
            act.activity_id,
            act.activity_type,
            act.input_json,
            act.logical_attempt,
            act.attempt + 1,
            act.idempotency_key,
        )

    def _arm_timeout(self, activity_id: str, kind: str, suffix: str, fire_at: int) -> None:
        self.emit(
            TimerScheduled(
                f"{activity_id}/timeout/{kind}/{suffix}", fire_at, f"timeout:{kind}:{activity_id}"
            )
        )

    def _after_failure(self, act: ActivityState) -> None:
        """``act`` just failed or timed out (its failure fields say how): what next."""
        cls = act.failure_class or "transient"
        error_type, message = act.error_type or "", act.error_message or ""
        step = self._step(act)
        policy = step.retry_policy if step is not None else DEFAULT_RETRY
        if cls == "unknown" and step is not None and step.status_query is not None:
            self._start_query(act, step.status_query)
        elif cls == "permanent":
            self._fail_step(act, f"{_label(act)} failed permanently: {error_type}: {message}")
        elif error_type in policy.non_retryable:
            self._fail_step(
                act,
                f"{_label(act)} failed permanently: {error_type} (non-retryable): {message}",
            )
        else:
            self._retry_or_exhaust(act, policy, step)

    def _retry_or_exhaust(self, act: ActivityState, policy: RetryPolicy, step: Step | None) -> None:
        """Retry transient trouble within the policy's bounds; past them, the step's
        ``on_exhausted`` decides (dead letter or the failure path)."""
        error_type, message = act.error_type or "", act.error_message or ""
        n = act.attempt
        times = "attempt" if n == 1 else "attempts"
        why = f"after {n} {times}"
        if n - act.budget_base < policy.max_attempts:
            fire_at = self.cmd.recorded_at + retry_delay_ms(
                policy, self.s.workflow_id, act.activity_id, n
            )
            limit = policy.max_elapsed_ms
            if limit is None or fire_at <= act.first_dispatch_at + limit:
                self.emit(
                    TimerScheduled(
                        f"{act.activity_id}/retry/{n}", fire_at, f"retry:{act.activity_id}"
                    )
                )
                return
            why = f"after {n} {times} (max_elapsed of {limit} ms used up)"
        if step is not None and step.on_exhausted == "dead_letter":
            self.emit(ActivityDeadLettered(act.activity_id, n, error_type, message))
            return
        self._fail_step(act, f"{_label(act)} failed {why}: {error_type}: {message}")

    def _fail_step(self, act: ActivityState, reason: str) -> None:
        """The repair path: the state's ``on_failure`` transition, else the run fails."""
        st = self.defn.states[act.state]
        if st.on_failure is not None:
            self.enter(st.on_failure)
            self.advance()
        else:
            self.emit(WorkflowFailed(reason))

    def _start_query(self, act: ActivityState, query_type: str) -> None:
        """The outcome of ``act`` is unknown: ask before anything is written again."""
        qid = f"{act.activity_id}{_QUERY_SEP}{act.attempt}"
        if qid in self.s.activities:  # cannot happen: each attempt is queried once
            raise HistoryError(f"workflow '{self.s.workflow_id}': '{qid}' was queried before")
        logical = self.s.logical_attempts.get(query_type, 0) + 1
        query_input = {"idempotency_key": act.idempotency_key, "input": json.loads(act.input_json)}
        self._dispatch(
            None,
            act.step,
            qid,
            query_type,
            canonical_json(query_input),
            logical,
            1,
            idempotency_key(self.s.workflow_id, query_type, logical),
        )

    def _query_answered(self, query: ActivityState, result_json: str) -> None:
        parent = self.s.activities[query.parent or ""]
        found, result, why = query_outcome(result_json)
        if found:
            self.emit(ActivityCompleted(parent.activity_id, parent.attempt, canonical_json(result)))
            self.advance()
        elif found is None:
            self.emit(
                WorkflowNeedsAttention(
                    parent.activity_id,
                    f"status query '{query.activity_type}' of activity '{parent.activity_id}' "
                    f"answered neither found nor not found ({why}); the outcome of attempt "
                    f"{parent.attempt} is unknown",
                )
            )
        else:  # the effect did not happen: the same logical attempt may go again
            step = self._step(parent)
            policy = step.retry_policy if step is not None else DEFAULT_RETRY
            error_type = parent.error_type or ""
            if error_type in policy.non_retryable:
                self._fail_step(
                    parent,
                    f"{_label(parent)} failed permanently: {error_type} (non-retryable): "
                    f"{parent.error_message or ''}",
                )
            else:
                self._retry_or_exhaust(parent, policy, step)

    def _query_failed(self, query: ActivityState) -> None:
        parent = query.parent or ""
        cls, error_type = query.failure_class, query.error_type or ""
        n = query.attempt
        if cls != "permanent" and n < QUERY_RETRY.max_attempts:
            delay = retry_delay_ms(QUERY_RETRY, self.s.workflow_id, query.activity_id, n)
            self.emit(
                TimerScheduled(
                    f"{query.activity_id}/retry/{n}",
                    self.cmd.recorded_at + delay,
                    f"retry:{query.activity_id}",
                )
            )
            return
        how = "failed permanently" if cls == "permanent" else f"failed after {n} attempts"
        self.emit(
            WorkflowNeedsAttention(
                parent,
                f"status query '{query.activity_type}' of activity '{parent}' {how}: "
                f"{error_type}: {query.error_message or ''}; the outcome of attempt "
                f"{self.s.activities[parent].attempt} is unknown",
            )
        )

    def _duration(self, value: Any, what: str) -> int:
        if callable(value):
            value = self._call(value, what)
        try:
            return duration_ms(value)
        except (TypeError, ValueError) as exc:
            raise _UserCodeFailed(f"state '{self.s.current_state}': {what}: {exc}") from None

    def _arm_wait_timer(self, st: State) -> None:
        base = f"{st.name}#{self.s.visit}"
        if isinstance(st.wait, TimerWait):
            delay = self._duration(st.wait.duration, "timer duration")
            self.emit(TimerScheduled(f"{base}/wait", self.cmd.recorded_at + delay, "wait"))
        elif isinstance(st.wait, SignalWait) and st.wait.timeout is not None:
            delay = self._duration(st.wait.timeout, f"timeout of signal '{st.wait.name}'")
            self.emit(
                TimerScheduled(
                    f"{base}/timeout", self.cmd.recorded_at + delay, f"timeout:{st.wait.name}"
                )
            )

    def _choose(self, st: State) -> str | None:
        for tr in st.transitions:
            if tr.when is None or self._call(tr.when, f"transition to '{tr.to}'"):
                return tr.to
        return None

    def _finish(self, st: State) -> None:
        if st.complete is not None:
            value = self._call(st.complete, "output")
            model = self.defn.output_model
            if model is not None:
                try:
                    value = model.model_validate(value)
                except ValidationError as exc:
                    raise _UserCodeFailed(
                        f"state '{st.name}': output does not match {model.__name__}: "
                        f"{format_validation_error(exc)}"
                    ) from None
            try:
                output_json = canonical_json(value)
            except (TypeError, ValueError) as exc:
                raise _UserCodeFailed(f"state '{st.name}': output is not JSON: {exc}") from None
            self.emit(WorkflowCompleted(output_json))
        elif st.fail is not None:
            reason = st.fail if isinstance(st.fail, str) else self._call(st.fail, "failure reason")
            self.emit(WorkflowFailed(str(reason)))
        else:
            self.emit(WorkflowFailed(f"state '{st.name}': no transition matched"))
