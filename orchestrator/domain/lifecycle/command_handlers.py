"""Events from commands: ``decide(state, command)``, pure and deterministic.

The only clock is ``command.recorded_at`` (epoch ms); randomness (retry jitter) is a
hash of recorded data, so replaying a history makes the same decisions. A decision
works by *simulation*: it emits an event, folds it into a scratch copy of the state it
owns (one copy per decision, see :mod:`orchestrator.domain.model.state`) and keeps going from
there, so one command can complete an activity, leave a state, enter the next one and
schedule its steps, and the events it returns are exactly what ``evolve`` needs to
rebuild the same state.

Each command type has one handler (:data:`HANDLERS`). A command that must not change the
run raises ``CommandRejected``; a definition function that raises (anything, from a
``KeyError`` to a ``RecursionError``) or returns something unusable fails the run with
the reason; a computed payload over the size limit, or a history past
``MAX_HISTORY_EVENTS``, stops the run in ``needs_attention`` (docs/limits.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, cast

from pydantic import ValidationError

from orchestrator.domain.authoring import migrations
from orchestrator.domain.authoring.definitions import (
    SignalWait,
    State,
    Step,
    TimerWait,
    WorkflowDefinition,
    canonical_json,
    duration_ms,
    resolve_definition,
)
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.upcasting import SchemaUnreadable
from orchestrator.domain.lifecycle import (
    activities,
    activity_operators,
    compensation,
    fan_out,
    human_tasks,
    run_continues,
    run_scope,
    run_stops,
    signals,
)
from orchestrator.domain.lifecycle.activities import (
    RunNeedsAttention,
    UserCodeFailed,
    check_computed,
)
from orchestrator.domain.lifecycle.evolve import DefinitionLookup, apply, started
from orchestrator.domain.lifecycle.human_tasks import TaskTokenHash
from orchestrator.domain.lifecycle.missing_versions import (
    VERSION_MISSING,
    RunParked,
    is_parked,
    missing_version_reason,
)
from orchestrator.domain.lifecycle.refusals import describe_command
from orchestrator.domain.model.errors import (
    CommandRejected,
    HistoryError,
    InvalidInputError,
    LimitExceededError,
    format_validation_error,
)
from orchestrator.domain.model.ids import check_workflow_id
from orchestrator.domain.model.keys import is_compensation
from orchestrator.domain.model.limits import (
    MAX_HISTORY_EVENTS,
    MAX_REASON_CHARS,
    clip_reasons,
    loads_bounded,
)
from orchestrator.domain.model.messages import (
    CancelWorkflow,
    CompleteActivity,
    DecideHumanTask,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    MigrateWorkflow,
    RedriveActivity,
    ResolveActivity,
    SignalWithStart,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TerminateWorkflow,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowNeedsAttention,
    WorkflowStarted,
    WorkflowTerminated,
)
from orchestrator.domain.model.state import ActivityState, WorkflowState
from orchestrator.domain.model.vocabulary import PurposeKind, TimerPurpose, WaitKind

__all__ = [
    "HANDLERS",
    "MAX_TRANSITIONS_PER_DECISION",
    "decide",
]

#: Guards against a loop of states that neither run a step nor wait.
MAX_TRANSITIONS_PER_DECISION = 1000
#: The latest ``recorded_at`` a command may carry (the year 9999): with durations
#: bounded too, no computed time can overflow a recorded long.
MAX_RECORDED_AT = 253_402_300_799_999

Handler = Callable[["Decision", Any], None]
#: Events a run past ``MAX_HISTORY_EVENTS`` may still record: the ones that stop it.
_PAST_HISTORY_BOUND = (
    WorkflowNeedsAttention,
    WorkflowCancelled,
    WorkflowTerminated,
    WorkflowContinuedAsNew,
)


def decide(
    definitions: Mapping[tuple[str, int], WorkflowDefinition],
    lookup: DefinitionLookup,
    state: WorkflowState | None,
    cmd: Envelope[Any],
    now_ms: int,
    task_token_hash: TaskTokenHash | None = None,
) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
    """The events ``cmd`` causes, as envelopes recorded at ``now_ms``, and the state
    they fold into (``state`` itself, unchanged, when there are none).

    ``task_token_hash`` gives the sha256 of the token the runtime issues for a human
    task id (see :mod:`orchestrator.domain.lifecycle.human_tasks`); without it tasks record no
    token hash and are decided by task id only."""
    p = cmd.payload
    wid = cmd.workflow_id
    if not 0 <= cmd.recorded_at <= MAX_RECORDED_AT:
        raise CommandRejected(f"command recorded_at {cmd.recorded_at} is not a valid time")
    if isinstance(p, StartWorkflow | SignalWithStart) and state is None:
        start = (
            p if isinstance(p, StartWorkflow) else StartWorkflow(p.name, p.version, p.input_json)
        )
        defn = _start_definition(definitions, start)
        d = Decision(lookup, defn, None, cmd, now_ms, cmd.message_id, task_token_hash)
        d.emit(
            WorkflowStarted(
                defn.name,
                defn.version,
                defn.digest,
                p.input_json,
                defn.input_schema_version,
                start.parent_workflow_id,  # a child run's parent (docs/child-workflows.md)
                start.parent_activity_id,
            )
        )
        d.enter(defn.initial)
        if isinstance(p, SignalWithStart):  # the signal first: the new run may wait for it
            signals.on_signal_with_start(d, p)
        else:
            d.advance()
        return d.finish()
    if isinstance(p, StartWorkflow):
        if state is not None:  # a child id naming another run is refused
            run_scope.check_child_start(state, p)
        return state, []
    what = describe_command(p)
    handler = HANDLERS.get(type(p))
    if handler is None:
        raise CommandRejected(f"{type(p).__name__} is not a workflow command")
    if state is None:
        raise CommandRejected(f"workflow '{wid}' does not exist; {what} refused")
    if state.workflow_id != wid:
        raise CommandRejected(
            f"command for workflow '{wid}' given the state of '{state.workflow_id}'"
        )
    try:
        defn = lookup(state)
    except HistoryError:
        raise _park(lookup, state, cmd, now_ms, what) from None
    if (
        state.attention_reason is not None
        and not isinstance(p, run_stops.STOP_COMMANDS)
        and not is_parked(state)
    ):
        if state.has_seen(cmd.message_id):
            return state, []
        raise CommandRejected(
            f"workflow '{wid}' needs attention ({state.attention_reason}); {what} refused "
            "(cancel it)"
        )
    d = Decision(lookup, defn, state, cmd, now_ms, state.run_id, task_token_hash)
    handler(d, p)
    return d.finish()


def _park(
    lookup: DefinitionLookup,
    state: WorkflowState,
    cmd: Envelope[Any],
    now_ms: int,
    what: str,
) -> RunParked:
    """The refusal of a command for a run whose version this process lacks; the first
    one records why the run waits (see :mod:`orchestrator.domain.lifecycle.missing_versions`)."""
    reason = missing_version_reason(state)
    refusal = f"{reason.removeprefix(VERSION_MISSING)}; {what} kept"
    if is_parked(state):
        return RunParked(refusal, state, [])
    d = Decision(lookup, cast(WorkflowDefinition, None), state, cmd, now_ms, state.run_id)
    d.emit(WorkflowNeedsAttention("", reason))
    new_state, envs = d.finish()
    assert new_state is not None
    return RunParked(refusal, new_state, envs)


def _start_definition(
    definitions: Mapping[tuple[str, int], WorkflowDefinition], p: StartWorkflow
) -> WorkflowDefinition:
    try:
        defn = resolve_definition(definitions, p.name, p.version)
    except InvalidInputError as exc:
        raise CommandRejected(str(exc)) from None
    try:
        loads_bounded(p.input_json, f"input of {defn.label}")
    except LimitExceededError as exc:
        raise CommandRejected(str(exc)) from None
    except json.JSONDecodeError:
        pass  # not JSON: parse_input says so, in its words
    except ValueError as exc:  # JSON, but not standard JSON (the input rule, docs/limits.md)
        raise CommandRejected(str(exc)) from None
    try:
        defn.parse_input(p.input_json)
    except InvalidInputError as exc:
        raise CommandRejected(str(exc)) from None
    except Exception as exc:  # a validator of the input model raised: deterministic
        reason = f"input validation of {defn.label} raised {type(exc).__name__}: {exc}"
        raise CommandRejected(reason[:MAX_REASON_CHARS]) from None
    return defn


class Decision:
    """The events of one command, folded into a scratch state as they are emitted."""

    __slots__ = (
        "_correlation",
        "cmd",
        "defn",
        "envs",
        "lookup",
        "now_ms",
        "run_id",
        "state",
        "task_token_hash",
    )

    def __init__(
        self,
        lookup: DefinitionLookup,
        defn: WorkflowDefinition,
        state: WorkflowState | None,
        cmd: Envelope[Any],
        now_ms: int,
        run_id: str,
        task_token_hash: TaskTokenHash | None = None,
    ) -> None:
        self.task_token_hash = task_token_hash
        self.lookup = lookup
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

    def emit(self, payload: Any) -> None:
        seq = (self.state.seq if self.state is not None else 0) + 1
        base = self.state.run_base_seq if self.state is not None else 0
        if seq - base > MAX_HISTORY_EVENTS and not isinstance(payload, _PAST_HISTORY_BOUND):
            raise RunNeedsAttention(
                f"the history reached {MAX_HISTORY_EVENTS:,} events, the limit per run "
                "(a long-lived run should continue as new)"
            )
        payload = clip_reasons(payload)
        if (
            isinstance(payload, WorkflowFailed | WorkflowCancelled)
            and self.state is not None
            and compensation.intercept(self, payload)
        ):
            return  # the run compensates its effects before it ends (docs/sagas.md)
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
        if self.state is None:
            self.state = started(env)
        else:
            if not self.envs:  # the one copy of this decision
                self.state = self.state.clone()
            apply(self.lookup, self.state, env)
        self.envs.append(env)

    def finish(self) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        if self.state is not None:
            self.state.seal()
        return self.state, self.envs

    def arm_timer(self, purpose: TimerPurpose, timer_id: str, fire_at: int) -> None:
        self.emit(TimerScheduled(timer_id, fire_at, str(purpose)))

    # -- the state machine ---------------------------------------------------------------

    def enter(self, name: str) -> None:
        self.emit(StateEntered(name, self.s.visits.get(name, 0) + 1))

    def call(self, fn: Callable[[Context], Any], what: str) -> Any:
        """Run a definition function; whatever it raises is deterministic, so the run
        fails with it."""
        try:
            return fn(Context(self.defn, self.s))
        except (UserCodeFailed, RunNeedsAttention):
            raise
        except SchemaUnreadable as exc:  # a recorded value this code cannot read
            raise RunNeedsAttention(f"state '{self.s.current_state}': {exc}") from None
        except Exception as exc:
            raise UserCodeFailed(
                f"state '{self.s.current_state}': {what} raised {type(exc).__name__}: {exc}"
            ) from None

    def use(self, value: Any, convert: Callable[[Any], Any], problem: str) -> Any:
        """``convert(value)`` of a value a definition function returned, or the run fails
        with ``problem: <why>`` (a ``RecursionError`` or ``OverflowError`` included)."""
        try:
            return convert(value)
        except (UserCodeFailed, RunNeedsAttention):
            raise
        except Exception as exc:
            why = str(exc) if isinstance(exc, TypeError | ValueError) else repr(exc)
            raise UserCodeFailed(f"state '{self.s.current_state}': {problem}: {why}") from None

    def advance(self) -> None:
        """Run the current state forward until it needs an outside report or ends."""
        try:
            self._advance()
        except UserCodeFailed as exc:
            self.emit(WorkflowFailed(str(exc)))
        except RunNeedsAttention as exc:
            self.emit(WorkflowNeedsAttention("", str(exc)))

    def _advance(self) -> None:
        for _ in range(MAX_TRANSITIONS_PER_DECISION):
            s = self.s
            if s.is_terminal or s.attention_reason is not None:
                return
            if s.compensation is not None:
                compensation.progress(self)
                return
            st = self.defn.states[s.current_state or ""]
            if s.steps_remaining:
                self._schedule_ready(st)
                if self.s.steps_remaining:
                    return
                continue  # a fan-out over no items completed at once
            w = s.wait
            if w is not None and not w.satisfied:
                if w.kind == WaitKind.HUMAN:
                    if w.task_id is None:
                        human_tasks.open_task(self)
                    return
                if w.correlated and w.correlation is None:
                    assert isinstance(st.wait, SignalWait)
                    signals.open_wait(self, st.wait)
                    continue  # a held signal may satisfy it at once
                if w.timer_id is None:
                    self._arm_wait_timer(st)
                return
            if w is not None and w.kind == WaitKind.HUMAN:
                target = human_tasks.route(self, st, w.outcome or "")
                if target is None:
                    return
            elif w is not None and w.timed_out:
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
                    if self._finish(st):
                        continue  # a new run began: advance it
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
        prefix = f"{s.visit_tag()}/"
        default_input: str | None = None
        for step in self.defn.step_order[st.name]:
            aid = prefix + step.name
            if aid in s.activities or step.name not in s.steps_remaining:
                continue
            if any(dep in s.steps_remaining for dep in step.after):
                continue  # a step leaves steps_remaining when it completed in this visit
            if step.for_each is not None:
                fan_out.advance(self, step, aid)
                continue
            if step.input is None:
                if default_input is None:
                    default_input = canonical_json(Context(self.defn, s).input_dict)
                input_json = default_input
            else:
                value = self.call(step.input, f"input of step '{step.name}'")
                input_json = self.use(
                    value, canonical_json, f"input of step '{step.name}' is not JSON"
                )
            activities.schedule_step(self, step, aid, input_json, self._child_id(step))

    def _child_id(self, step: Step) -> str | None:
        """The workflow id a child step's ``workflow_id`` function gives (checked)."""
        if step.child_id is None:
            return None
        what = f"workflow_id of child step '{step.name}'"
        child_id: str = self.use(self.call(step.child_id, what), check_workflow_id, what)
        return child_id

    def fail_step(self, act: ActivityState, reason: str) -> None:
        """The repair path: the state's ``on_failure`` transition, else the run fails
        (a compensation that failed is given up and the next one runs)."""
        if is_compensation(act.activity_id):
            compensation.fail(self, act, reason)
            return
        if fan_out.is_item(act.activity_id):
            step_reason = fan_out.item_failed(self, act, reason)
            if step_reason is None:
                return  # the fan-out goes on without this item
            reason = step_reason
        st = self.defn.states[act.state]
        if st.on_failure is not None:
            self.enter(st.on_failure)
            self.advance()
        else:
            self.emit(WorkflowFailed(reason))

    def _arm_wait_timer(self, st: State) -> None:
        base = self.s.visit_tag()
        now = self.cmd.recorded_at
        if isinstance(st.wait, TimerWait):
            delay = self._duration(st.wait.duration, "timer duration")
            purpose = TimerPurpose.wait()
            self.arm_timer(purpose, purpose.timer_id(base), now + delay)
        elif isinstance(st.wait, SignalWait) and st.wait.timeout is not None:
            delay = self._duration(st.wait.timeout, f"timeout of signal '{st.wait.name}'")
            purpose = TimerPurpose.signal_timeout(st.wait.name)
            self.arm_timer(purpose, purpose.timer_id(base), now + delay)

    def duration(self, value: Any, what: str) -> int:
        """Milliseconds of a constant or computed duration (the run fails if unusable)."""
        return self._duration(value, what)

    def _duration(self, value: Any, what: str) -> int:
        if callable(value):
            value = self.call(value, what)
        return self.use(value, duration_ms, what)  # type: ignore[no-any-return]

    def _choose(self, st: State) -> str | None:
        for tr in st.transitions:
            what = f"transition to '{tr.to}'"
            if tr.when is None or self.use(self.call(tr.when, what), bool, what):
                return tr.to
        return None

    def _finish(self, st: State) -> bool:
        """End the run by the state's terminal outcome; True when a new run began (False
        too when the continue budget holds a continue-as-new: :mod:`.run_continues`)."""
        if st.continue_as_new is not None:
            return run_continues.continue_as_new(self, st)
        if st.complete is not None:
            value = self.call(st.complete, "output")
            model = self.defn.output_model
            if model is not None:
                try:
                    value = model.model_validate(value)
                except ValidationError as exc:
                    raise UserCodeFailed(
                        f"state '{st.name}': output does not match {model.__name__}: "
                        f"{format_validation_error(exc)}"
                    ) from None
                except Exception as exc:
                    raise UserCodeFailed(
                        f"state '{st.name}': output validation raised {type(exc).__name__}: {exc}"
                    ) from None
            output_json = self.use(value, canonical_json, "output is not JSON")
            check_computed(output_json, f"state '{st.name}': output")
            self.emit(WorkflowCompleted(output_json))
        elif st.fail is not None:
            if isinstance(st.fail, str):
                reason = st.fail
            else:
                reason = self.use(self.call(st.fail, "failure reason"), str, "failure reason")
            self.emit(WorkflowFailed(reason))
        else:
            self.emit(WorkflowFailed(f"state '{st.name}': no transition matched"))
        return False


# -- command handlers ---------------------------------------------------------------------


def _on_timer(d: Decision, p: FireTimer) -> None:
    s = d.s
    if s.is_terminal:
        return
    timer = run_scope.due_timer(s, d.cmd, p.timer_id)
    if timer is None:
        return
    d.emit(TimerFired(p.timer_id))
    purpose = TimerPurpose.parse(timer.purpose)
    if purpose.kind in (PurposeKind.RETRY, PurposeKind.ACTIVITY_TIMEOUT):
        activities.on_activity_timer(d, purpose)
    elif purpose.kind is PurposeKind.HUMAN:
        human_tasks.on_timer(d, purpose)
    else:
        d.advance()


def _guarded(handler: Handler) -> Handler:
    """A handler whose decision may run into a limit: the run then needs attention."""

    def run(d: Decision, p: Any) -> None:
        try:
            handler(d, p)
        except RunNeedsAttention as exc:
            d.emit(WorkflowNeedsAttention("", str(exc)))
        except UserCodeFailed as exc:
            d.emit(WorkflowFailed(str(exc)))

    return run


#: One handler per command type (``StartWorkflow`` is handled by :func:`decide`).
HANDLERS: dict[type, Handler] = {
    CompleteActivity: _guarded(activities.on_complete),
    FailActivity: _guarded(activities.on_fail),
    HeartbeatActivity: _guarded(activities.on_heartbeat),
    ResolveActivity: _guarded(activity_operators.on_resolve),
    RedriveActivity: _guarded(activity_operators.on_redrive),
    FireTimer: _guarded(_on_timer),
    SignalWorkflow: _guarded(signals.on_signal),
    SignalWithStart: _guarded(signals.on_signal_with_start),
    DecideHumanTask: _guarded(human_tasks.on_decide),
    MigrateWorkflow: _guarded(migrations.on_migrate),
    CancelWorkflow: run_stops.on_cancel,
    TerminateWorkflow: run_stops.on_terminate,
}
