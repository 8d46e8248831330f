"""Replay check: re-decide a recorded history with the current code, find where it differs.

A run's history is a sequence of *groups*: the events one command caused, which share a
``causation_id`` (the command's message id) and a ``recorded_at`` (the decision's clock,
stamped by the orchestrator). For each group the command is taken from the history when
it was exported with it (a command envelope whose ``message_id`` is the causation id), or
else rebuilt from the group's first event (:data:`COMMAND_FROM_EVENT`: the event echoes
the command's fields). The command is decided again from the state folded so far, and
the new events are compared with the recorded ones; the first difference ends the run's
check. A group whose command cannot be rebuilt is only folded (the fold must still
succeed), and the report counts it as such.

Clocks: the orchestrator decides each command at its own clock (it sets the command's
``recorded_at`` to the time it takes it) and stamps the events with that same time, so a
group is re-decided at its events' ``recorded_at``: exact, from the events alone.
Histories written before the orchestrator did so were decided at the *client's* clock: a
recorded command still carries it, and for a rebuilt one, if the only difference is that
every timer of the group is shifted by the same few seconds (the command waited in
Kafka), that shift is taken as the command's clock (both counted as "clock inferred").

A recorded refusal (``CommandRefused``) is compared with the new code's refusal of the
same command (its reason included); one the new code would not make is only folded, since
the runtime's own checks (a human decision's proof) are not repeated here.

Generic over event types: payloads are compared as whole dataclasses and rendered with
their fields, so a new event type needs no code here; a new command only needs one line
in :data:`COMMAND_FROM_EVENT` to be re-decided rather than folded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model.errors import CommandRejected, HistoryError
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityHeartbeat,
    ActivityRedriven,
    ActivityResolved,
    CancelWorkflow,
    CommandRefused,
    CompensationStarted,
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    MigrateWorkflow,
    RedriveActivity,
    ResolveActivity,
    SignalReceived,
    SignalWithStart,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowMigrated,
    WorkflowStarted,
    WorkflowTerminated,
)
from orchestrator.domain.model.state import WorkflowState

__all__ = [
    "COMMAND_FROM_EVENT",
    "MAX_INFERRED_LAG_MS",
    "UNCOMPARED_FIELDS",
    "Divergence",
    "RunReport",
    "group_runs",
    "payload_dict",
    "replay_history",
    "replay_on_version",
    "replay_run",
]

#: The command each event type echoes, when it opens a group: its fields are copied by
#: name from the event (a field the event lacks comes from the rest of the group, see
#: :func:`_extra_fields`, or keeps its default).
COMMAND_FROM_EVENT: dict[type, type] = {
    WorkflowStarted: StartWorkflow,
    ActivityCompleted: CompleteActivity,
    ActivityFailed: FailActivity,
    ActivityHeartbeat: HeartbeatActivity,
    ActivityResolved: ResolveActivity,
    ActivityRedriven: RedriveActivity,
    SignalReceived: SignalWorkflow,
    TimerFired: FireTimer,
    WorkflowCancelled: CancelWorkflow,
    WorkflowTerminated: TerminateWorkflow,
    # a group opens with it only when a cancel began compensating (docs/sagas.md)
    CompensationStarted: CancelWorkflow,
    WorkflowMigrated: MigrateWorkflow,
}

#: Fields not compared: a run records the digest of the code that started it (or that it
#: was migrated to), which the report shows as "edited in place" rather than as a
#: different decision.
UNCOMPARED_FIELDS = frozenset({"definition_digest", "from_digest", "to_digest"})

#: The largest command clock shift inferred from timers: how long a command may have
#: waited in Kafka before it was decided (or a client's clock been behind), in ms.
MAX_INFERRED_LAG_MS = 10 * 60 * 1000
#: How far ahead of the orchestrator a sender's clock may be, in ms.
MAX_INFERRED_LEAD_MS = 5 * 1000


def payload_dict(env: Envelope[Any] | None) -> dict[str, Any] | None:
    """``{"type": ..., **fields}`` of an envelope's payload (None for no event)."""
    if env is None:
        return None
    p = env.payload
    body = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    return {"type": env.type, **body}


@dataclass(frozen=True)
class Divergence:
    """The first event where the new decisions differ from the recorded ones."""

    seq: int
    #: The recorded event (None: the new code writes an event the history lacks).
    expected: dict[str, Any] | None
    #: The new event (None: the new code writes no event there).
    got: dict[str, Any] | None
    #: Why, when it is not just another event (a refusal, a history that does not fold).
    note: str = ""
    #: The command that was decided again (its type), or "" for a fold.
    command: str = ""


@dataclass
class RunReport:
    """The replay of one run."""

    workflow_id: str
    run_id: str
    name: str = ""
    version: int = 0
    recorded_digest: str = ""
    #: Digest of the current definition of (name, version); "" when there is none.
    current_digest: str = ""
    events: int = 0
    groups: int = 0
    #: Groups decided again (from a recorded or a rebuilt command).
    redecided: int = 0
    #: Groups whose command could not be rebuilt: folded only.
    folded_only: int = 0
    #: Groups whose command clock was inferred from their timers.
    clock_inferred: int = 0
    #: Command types of the groups folded only (what replay could not decide again).
    folded_types: list[str] = field(default_factory=list)
    #: The run's recorded migrations: seq, from/to version, the digest recorded for the
    #: target and the target's digest now ("" when it is not registered).
    migrations: list[dict[str, Any]] = field(default_factory=list)
    divergence: Divergence | None = None

    @property
    def ok(self) -> bool:
        return self.divergence is None

    @property
    def digest_changed(self) -> bool:
        """The definition of this (name, version), or of a version the run was migrated
        to, was edited in place since it was recorded."""
        if bool(self.current_digest) and self.current_digest != self.recorded_digest:
            return True
        return any(m["current_digest"] not in ("", m["recorded_digest"]) for m in self.migrations)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        d["digest_changed"] = self.digest_changed
        return d


def group_runs(envelopes: Iterable[Envelope[Any]]) -> list[tuple[list[Envelope[Any]], dict]]:
    """Each run's events in seq order and its recorded commands by message id.

    A workflow's runs are replayed as one sequence, in order of first appearance: a
    ``WorkflowContinuedAsNew`` and the next run's first events come from one command,
    and the next run starts from the state the previous one handed over. An event read
    twice (same seq and message id) is kept once, two different events at one seq are a
    ``HistoryError``. Commands (envelopes whose payload is a command) are matched to runs
    by workflow id.
    """
    runs: dict[str, dict[int, Envelope[Any]]] = {}
    commands: dict[str, dict[str, Envelope[Any]]] = {}
    for env in envelopes:
        kind = getattr(env.payload, "KIND", "")
        if kind == "command":
            commands.setdefault(env.workflow_id, {})[env.message_id] = env
            continue
        if kind != "event":
            continue
        by_seq = runs.setdefault(env.workflow_id, {})
        old = by_seq.get(env.seq)
        if old is not None and old.message_id != env.message_id:
            raise HistoryError(
                f"workflow '{env.workflow_id}': two different events at seq {env.seq} "
                f"({old.message_id}, {env.message_id})"
            )
        by_seq[env.seq] = env
    return [
        ([by_seq[s] for s in sorted(by_seq)], commands.get(wid, {})) for wid, by_seq in runs.items()
    ]


def _groups(events: list[Envelope[Any]]) -> list[list[Envelope[Any]]]:
    out: list[list[Envelope[Any]]] = []
    for env in events:
        if out and env.causation_id == out[-1][0].causation_id and env.causation_id:
            out[-1].append(env)
        else:
            out.append([env])
    return out


def _extra_fields(cmd_type: type, group: list[Envelope[Any]]) -> dict[str, Any]:
    """Command fields the opening event does not echo: a found resolution's result, the
    signal of a signal-with-start."""
    if cmd_type is SignalWithStart:
        sig = next(e.payload for e in group if isinstance(e.payload, SignalReceived))
        return {f.name: getattr(sig, f.name) for f in dataclasses.fields(sig)}
    if cmd_type is ResolveActivity and len(group) > 1:
        nxt = group[1].payload
        if isinstance(nxt, ActivityCompleted):
            return {"result_json": nxt.result_json}
    if cmd_type is MigrateWorkflow:
        return {"to_digest": ""}  # a target edited in place is flagged, not refused
    return {}


def _rebuild_command(group: list[Envelope[Any]]) -> Envelope[Any] | None:
    first = group[0]
    cmd_type = COMMAND_FROM_EVENT.get(type(first.payload))
    if cmd_type is None or first.causation_id is None:
        return None
    if cmd_type is StartWorkflow and any(isinstance(e.payload, SignalReceived) for e in group):
        cmd_type = SignalWithStart  # a start that delivered a signal in the same decision
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cmd_type):
        if hasattr(first.payload, f.name):
            values[f.name] = getattr(first.payload, f.name)
    values.update(_extra_fields(cmd_type, group))
    try:
        payload = cmd_type(**values)
    except TypeError:  # a field neither the event nor the group holds
        return None
    return Envelope(
        message_id=first.causation_id,
        workflow_id=first.workflow_id,
        run_id="" if cmd_type in (StartWorkflow, SignalWithStart) else first.run_id,
        seq=0,
        type=cmd_type.__name__,
        recorded_at=first.recorded_at,
        payload=payload,
        correlation_id=first.correlation_id,
    )


def _first_difference(recorded: list[Envelope[Any]], got: list[Envelope[Any]]) -> Divergence | None:
    for i in range(max(len(recorded), len(got))):
        exp = recorded[i] if i < len(recorded) else None
        new = got[i] if i < len(got) else None
        if (
            exp is not None
            and new is not None
            and (exp.type, exp.seq) == (new.type, new.seq)
            and _same(exp.payload, new.payload)
        ):
            continue
        seq = exp.seq if exp is not None else new.seq if new is not None else 0
        return Divergence(seq, payload_dict(exp), payload_dict(new))
    return None


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    ignored = {f.name: None for f in dataclasses.fields(a) if f.name in UNCOMPARED_FIELDS}
    return bool(ignored) and dataclasses.replace(a, **ignored) == dataclasses.replace(b, **ignored)


def _clock_shift(recorded: list[Envelope[Any]], got: list[Envelope[Any]]) -> int | None:
    """The one shift that maps every new timer deadline onto the recorded one, if the
    groups differ in nothing else and it is a plausible command delay."""
    if len(recorded) != len(got):
        return None
    shift: int | None = None
    for exp, new in zip(recorded, got, strict=True):
        a, b = exp.payload, new.payload
        if exp.type == new.type and _same(a, b):
            continue
        if not (isinstance(a, TimerScheduled) and isinstance(b, TimerScheduled)):
            return None
        if dataclasses.replace(b, fire_at=a.fire_at) != a:
            return None
        delta = a.fire_at - b.fire_at
        if shift is None:
            shift = delta
        elif delta != shift:
            return None
    if shift is None or not -MAX_INFERRED_LAG_MS <= shift <= MAX_INFERRED_LEAD_MS:
        return None
    return shift


def _refused(group: list[Envelope[Any]], cmd: Envelope[Any], why: str) -> Divergence:
    return Divergence(group[0].seq, payload_dict(group[0]), None, why, cmd.type)


def replay_run(
    decider: Decider, events: list[Envelope[Any]], commands: dict[str, Envelope[Any]] | None = None
) -> RunReport:
    """Re-decide one run's recorded ``events`` (in seq order) with ``decider``."""
    commands = commands or {}
    first = events[0]
    report = RunReport(first.workflow_id, first.run_id, events=len(events))
    p = first.payload
    if isinstance(p, WorkflowStarted):
        report.name, report.version, report.recorded_digest = p.name, p.version, p.definition_digest
        current = decider.definitions.get((p.name, p.version))
        report.current_digest = current.digest if current is not None else ""
    state: WorkflowState | None = None
    for group in _groups(events):
        report.groups += 1
        _note_migration(decider, group[0], report)
        try:
            state, diff = _replay_group(decider, state, group, commands, report)
        except HistoryError as exc:
            diff = Divergence(group[0].seq, payload_dict(group[0]), None, str(exc))
        if diff is not None:
            report.divergence = diff
            break
    return report


def _replay_group(
    decider: Decider,
    state: WorkflowState | None,
    group: list[Envelope[Any]],
    commands: dict[str, Envelope[Any]],
    report: RunReport,
) -> tuple[WorkflowState | None, Divergence | None]:
    cause = group[0].causation_id
    recorded_cmd = commands.get(cause) if cause is not None else None
    cmd = recorded_cmd if recorded_cmd is not None else _rebuild_command(group)
    if cmd is None:
        report.folded_only += 1
        opener = group[0].type
        if opener not in report.folded_types:
            report.folded_types.append(opener)
        return decider.fold(group, state), None
    report.redecided += 1
    now = group[0].recorded_at
    client_clock = cmd.recorded_at

    def decide(c: Envelope[Any]) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        return decider.handle(state, c, now)

    cmd = dataclasses.replace(cmd, recorded_at=now)
    if isinstance(cmd.payload, MigrateWorkflow) and cmd.payload.to_digest:
        cmd = dataclasses.replace(cmd, payload=dataclasses.replace(cmd.payload, to_digest=""))
    refusal = len(group) == 1 and isinstance(group[0].payload, CommandRefused)
    try:
        new_state, got = decide(cmd)
    except CommandRejected as exc:
        if not refusal or state is None:
            return state, _refused(group, cmd, f"the new code refuses {cmd.type}: {exc}")
        new_state, got = decider.refuse(state, cmd, now, str(exc))
    else:
        if refusal:  # refused by a check of the runtime's (a decision's proof): folded
            report.redecided -= 1
            report.folded_only += 1
            if group[0].type not in report.folded_types:
                report.folded_types.append(group[0].type)
            return decider.fold(group, state), None
    diff = _first_difference(group, got)
    if diff is not None and not isinstance(cmd.payload, FireTimer):
        # a history decided at the client's clock (before the orchestrator set its own)
        legacy: int | None = None
        if recorded_cmd is not None and client_clock != now:
            legacy = client_clock
        elif recorded_cmd is None:
            shift = _clock_shift(group, got)
            legacy = None if shift is None else now + shift
        if legacy is not None:
            cmd = dataclasses.replace(cmd, recorded_at=legacy)
            try:
                new_state, got = decide(cmd)
            except CommandRejected as exc:
                return state, _refused(group, cmd, f"the new code refuses {cmd.type}: {exc}")
            diff = _first_difference(group, got)
            if diff is None:
                report.clock_inferred += 1
    if diff is not None:
        return state, dataclasses.replace(diff, command=cmd.type)
    return new_state, None


def _note_migration(decider: Decider, first: Envelope[Any], report: RunReport) -> None:
    p = first.payload
    if isinstance(p, WorkflowMigrated):
        current = decider.definitions.get((report.name, p.to_version))
        report.migrations.append(
            {
                "seq": first.seq,
                "from_version": p.from_version,
                "to_version": p.to_version,
                "recorded_digest": p.to_digest,
                "current_digest": current.digest if current is not None else "",
            }
        )


def replay_on_version(
    decider: Decider,
    events: list[Envelope[Any]],
    commands: dict[str, Envelope[Any]] | None,
    version: int,
) -> RunReport:
    """Re-decide one run's recorded ``events`` as if it had started on ``version``: the
    first divergence is where that version would have decided differently (what a
    migration's dry run shows)."""

    def on_version(env: Envelope[Any]) -> Envelope[Any]:
        p = env.payload
        if isinstance(p, WorkflowStarted | StartWorkflow):
            return dataclasses.replace(env, payload=dataclasses.replace(p, version=version))
        return env

    moved = {k: on_version(c) for k, c in (commands or {}).items()}
    return replay_run(decider, [on_version(e) for e in events], moved)


def replay_history(
    decider: Decider,
    envelopes: Iterable[Envelope[Any]],
    on_run: Callable[[RunReport], None] | None = None,
) -> list[RunReport]:
    """Replay every run in ``envelopes`` (events, optionally with their commands)."""
    reports = []
    for events, commands in group_runs(envelopes):
        report = replay_run(decider, events, commands)
        reports.append(report)
        if on_run is not None:
            on_run(report)
    return reports
