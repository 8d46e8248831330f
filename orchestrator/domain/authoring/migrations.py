"""Recorded migrations: moving a live run to a newer version of its workflow.

A migration is declared on the *new* definition, from one older version
(``WorkflowDefinition(..., migrations=[Migration(1, states={...}, data=fn)])``): it maps
the run's position (its current state) to a state of the new version, and ``data``
(optional, pure) maps the run's data, ``fn(ctx) -> {"input": ..., "results": ...}``,
where ``ctx`` is the :class:`~orchestrator.domain.authoring.run_context.Context` of the old run.

``MigrateWorkflow`` is decided here (:func:`on_migrate`); the rules, documented in
docs/versioning.md ("Migrate"):

* refused, with a one-line reason, when the run is finished or compensating, runs
  another version than the command checked (``from_version``), when the target
  version is not registered here or has another digest than the one checked
  (``to_digest``), when the target declares no migration from the run's version, when
  the run's state is not mapped, or when the run is not waiting (an activity in
  flight could report for a step the new version does not have);
* otherwise ``WorkflowMigrated`` is recorded (its applier switches the run's version,
  digest and data), then the run *enters* the mapped state of the new version
  (``StateEntered`` with the next visit), like any transition: the old wait ends (its
  timers disarmed, an open human task closed, a correlation closed), the new state's
  steps run and its wait begins (a signal held in the inbox satisfies it at once);
* a deadline carries over: when the old wait had a timer (a timer wait, a signal
  timeout) and the new state waits at once the same way (no steps; a timer wait, or a
  timeout of the same signal), the new timer fires at the earlier of the old deadline
  and one computed afresh from the migration's clock, so a migration never restarts
  or prolongs a wait.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.waits import SignalWait, TimerWait
from orchestrator.domain.model.errors import CommandRejected, DefinitionError, LimitExceededError
from orchestrator.domain.model.fingerprint import callable_fingerprint, canonical_json
from orchestrator.domain.model.limits import check_payload_size
from orchestrator.domain.model.messages import Envelope, MigrateWorkflow, WorkflowMigrated
from orchestrator.domain.model.state import WorkflowState, remember_command
from orchestrator.domain.model.vocabulary import TimerPurpose, WorkflowStatus

__all__ = [
    "APPLIERS",
    "DataKey",
    "Migration",
    "on_migrate",
    "target_definition",
    "validate_migrations",
]


class DataKey(StrEnum):
    """What a migration's ``data`` function may replace."""

    #: The run's input (validated against the new version's input model).
    INPUT = "input"
    #: Step results by step name of the new version (``None`` drops one).
    RESULTS = "results"


@dataclass(frozen=True)
class Migration:
    """How a run of ``from_version`` continues on the definition that declares this.

    ``states`` maps each old state a run may be migrated from to a state of the new
    version (a state not listed is refused); ``data(ctx)`` returns what to replace in
    the run's data, a mapping with ``"input"`` and/or ``"results"`` (see
    :class:`DataKey`); ``name`` is recorded in ``WorkflowMigrated`` (default
    ``v<from>->v<to>``).
    """

    from_version: int
    states: Mapping[str, str]
    data: Callable[[Context], Mapping[str, Any]] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.states, Mapping):
            object.__setattr__(self, "states", dict(self.states))

    def label(self, to_version: int) -> str:
        return self.name or f"v{self.from_version}->v{to_version}"

    def describe(self) -> dict[str, Any]:
        """Its part of the declaring definition's digest."""
        return {
            "from_version": self.from_version,
            "states": sorted(self.states.items()),
            "data": callable_fingerprint(self.data),
            "name": self.name,
        }


def validate_migrations(
    label: str, version: int, states: Mapping[str, Any], migrations: Any
) -> dict[int, Migration]:
    """The migrations of the definition ``label`` (at ``version``, with ``states``) by
    the version they migrate from; ``DefinitionError`` names what is wrong."""
    out: dict[int, Migration] = {}
    for m in migrations or ():
        if not isinstance(m, Migration):
            raise DefinitionError(f"{label}: migrations takes Migration objects, got {m!r}")
        where = f"{label}: migration from v{m.from_version}"
        v = m.from_version
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < version:
            raise DefinitionError(
                f"{label}: a migration's from_version must be an int from 1 to {version - 1}, "
                f"got {v!r}"
            )
        if v in out:
            raise DefinitionError(f"{where} is declared twice")
        if not isinstance(m.states, Mapping) or not m.states:
            raise DefinitionError(f"{where}: states must map old state names to new ones")
        for old, new in m.states.items():
            if not isinstance(old, str) or not isinstance(new, str):
                raise DefinitionError(f"{where}: states must map names to names")
            if new not in states:
                raise DefinitionError(f"{where}: maps '{old}' to unknown state '{new}'")
        if m.data is not None and not callable(m.data):
            raise DefinitionError(f"{where}: data must be a function of the context")
        out[v] = m
    return out


def target_definition(
    lookup: Callable[[WorkflowState], Any], s: WorkflowState, version: int
) -> Any:
    """The registered definition of the run's workflow at ``version``, or None.

    It asks the run's definition lookup about the run as if it were at ``version``.
    """
    probe = s.clone()
    probe.version = version
    try:
        return lookup(probe)
    except Exception:  # HistoryError: not registered here
        return None


def on_migrate(d: Any, p: MigrateWorkflow) -> None:
    """Decide ``MigrateWorkflow`` on the decision ``d`` (see the module doc)."""
    s: WorkflowState = d.s
    if d.cmd.message_id in s.seen_commands:
        return  # a redelivery of the migration recorded already
    what = f"migration to version {p.to_version}"

    def refuse(reason: str) -> CommandRejected:
        return CommandRejected(f"{reason}; {what} refused")

    wid = s.workflow_id
    if s.is_terminal:
        raise refuse(f"workflow '{wid}' is {s.status}")
    if s.compensation is not None:
        raise refuse(f"workflow '{wid}' is compensating")
    if p.from_version and p.from_version != s.version:
        raise refuse(f"workflow '{wid}' runs v{s.version}, not v{p.from_version} as checked")
    if p.to_version == s.version:
        raise refuse(f"workflow '{wid}' already runs v{s.version}")
    target = target_definition(d.lookup, s, p.to_version)
    if target is None:
        raise refuse(f"this process has no v{p.to_version} of workflow '{s.name}'")
    if p.to_digest and p.to_digest != target.digest:
        raise refuse(
            f"{target.label} here has digest {target.digest[:12]}, not "
            f"{p.to_digest[:12]} as checked (dry-run it again)"
        )
    mig: Migration | None = target.migrations.get(s.version)
    if mig is None:
        raise refuse(f"{target.label} declares no migration from v{s.version}")
    label = mig.label(target.version)
    here = s.current_state or ""
    to_state = mig.states.get(here)
    if to_state is None:
        mapped = ", ".join(f"'{k}'" for k in sorted(mig.states))
        raise refuse(
            f"workflow '{wid}' is in state '{here}', which migration {label} does not map "
            f"(it maps {mapped})"
        )
    if s.in_flight:
        raise refuse(
            f"workflow '{wid}' is in state '{here}' with activity '{min(s.in_flight)}' "
            "in flight; migrate it while it waits"
        )
    if s.status != WorkflowStatus.WAITING:
        raise refuse(f"workflow '{wid}' is {s.status} in state '{here}', not waiting")
    data_json = _data(d, s, mig, target, label, refuse)
    deadline = _wait_deadline(s)
    d.emit(
        WorkflowMigrated(
            from_version=s.version,
            to_version=target.version,
            from_digest=s.digest,
            to_digest=target.digest,
            from_state=here,
            to_state=to_state,
            migration=label,
            data_json=data_json,
            actor=p.actor,
            reason=p.reason,
        )
    )
    d.defn = target
    d.enter(to_state)
    _carry_deadline(d, target.states[to_state], deadline)
    d.advance()


def _data(
    d: Any,
    s: WorkflowState,
    mig: Migration,
    target: Any,
    label: str,
    refuse: Callable[[str], CommandRejected],
) -> str:
    """The ``data_json`` of the migration: its data function's answer, checked."""
    value: Any = {}
    if mig.data is not None:
        try:
            value = mig.data(Context(d.defn, s))
        except Exception as exc:
            raise refuse(f"migration {label}: data raised {type(exc).__name__}: {exc}") from None
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise refuse(f"migration {label}: data must return a mapping, got {value!r:.80}")
        unknown = sorted(set(value) - set(DataKey))
        if unknown:
            raise refuse(
                f"migration {label}: data returned {', '.join(unknown)}; it may replace "
                f"only {' and '.join(DataKey)}"
            )
        value = dict(value)
    results = value.get(DataKey.RESULTS, {})
    if not isinstance(results, Mapping):
        raise refuse(f"migration {label}: data's results must map step names to results")
    for step, result in results.items():
        if result is not None and step not in target.steps_by_name:
            raise refuse(
                f"migration {label}: data's results name step '{step}', "
                f"which {target.label} does not have"
            )
    try:
        text = canonical_json(value)
        check_payload_size(text, f"migration {label}: data")
    except LimitExceededError as exc:
        raise refuse(str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise refuse(f"migration {label}: data is not JSON: {exc}") from None
    new_input = canonical_json(value[DataKey.INPUT]) if DataKey.INPUT in value else s.input_json
    try:
        target.parse_input(new_input)
    except Exception as exc:
        hint = "" if DataKey.INPUT in value else " (map it with the migration's data)"
        raise refuse(f"the run's input does not fit {target.label}: {exc}{hint}") from None
    return text


def _wait_deadline(s: WorkflowState) -> tuple[str, int] | None:
    """``(purpose, fire_at)`` of the timer of the run's current wait, if it has one."""
    w = s.wait
    timer = None if w is None or w.timer_id is None else s.timers.get(w.timer_id)
    return None if timer is None else (timer.purpose, timer.fire_at)


def _carry_deadline(d: Any, st: Any, deadline: tuple[str, int] | None) -> None:
    """Arm the new wait's timer at the earlier of the old deadline and a fresh one,
    when the new state waits at once the same way the old one did."""
    w = d.s.wait
    if deadline is None or st.steps or w is None or w.satisfied or w.timer_id is not None:
        return
    wait = st.wait
    if isinstance(wait, TimerWait):
        purpose, value, what = TimerPurpose.wait(), wait.duration, "timer duration"
    elif isinstance(wait, SignalWait) and wait.timeout is not None:
        purpose = TimerPurpose.signal_timeout(wait.name)
        value, what = wait.timeout, f"timeout of signal '{wait.name}'"
    else:
        return
    if str(purpose) != deadline[0]:
        return
    fresh = d.cmd.recorded_at + d.duration(value, what)
    d.arm_timer(purpose, purpose.timer_id(d.s.visit_tag()), min(deadline[1], fresh))


# -- the applier (registered by orchestrator.domain.lifecycle.evolve) ------------------------------


def _migrated(lookup: Any, n: WorkflowState, p: WorkflowMigrated, env: Envelope[Any]) -> None:
    """The run follows ``to_version`` from now on; its data takes what the migration
    replaced. The position moves with the ``StateEntered`` that follows."""
    n.version = p.to_version
    n.digest = p.to_digest
    data = json.loads(p.data_json)
    if DataKey.INPUT in data:
        n.input_json = canonical_json(data[DataKey.INPUT])
        if lookup is not None:  # the migrated input was checked against the new model
            n.input_schema_version = lookup(n).input_schema_version
    results = data.get(DataKey.RESULTS) or {}
    if results:
        kept = n.mut_step_results()
        for step, result in results.items():
            if result is None:
                kept.pop(step, None)
            else:
                kept[step] = canonical_json(result)
    n.memo = {}  # the input parsed by the old version's model must not be read again
    if env.causation_id is not None:
        n.seen_commands = remember_command(n.seen_commands, env.causation_id)


APPLIERS: dict[type, Callable[..., None]] = {WorkflowMigrated: _migrated}
