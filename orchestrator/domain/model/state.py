"""The folded state of one workflow run: what ``evolve`` builds and snapshots store.

Ownership contract (why folding is linear and still safe): a :class:`WorkflowState`
shares its containers with the states it was cloned from, and a container is mutated
only by a state that *owns* it. :meth:`WorkflowState.clone` owns nothing; the first
``mut_*`` call on a container copies it and marks it owned, later calls mutate it in
place. So ``evolve(state, event)`` (a fresh clone per event) never changes ``state``,
while one decision or one ``fold`` clones once and copies each container at most once,
however many events it applies. :meth:`WorkflowState.seal` gives up ownership when the
scratch state is handed out.

``seen_commands`` is a bounded FIFO window of the last :data:`SEEN_COMMANDS_WINDOW`
command ids that wrote events (signals, cancels, resolutions, redrives). Redelivery is
always recent: the orchestrator commits a command's offset in the same transaction as
its events, so a recorded command comes back only when a client retries a send it could
not confirm (seconds later), long before a thousand further commands reach the run.

Signals are the exception: a webhook sender re-delivers an event hours or days later,
and the connector's Redis marker may be gone by then. So ``signal_commands`` keeps the
id of every signal command the workflow recorded (received or refused) for its whole
life, across continue-as-new, bounded like the history (:data:`SIGNAL_COMMANDS_LIMIT`
ids; docs/connector.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.model.keys import visit_tag
from orchestrator.domain.model.limits import MAX_HISTORY_EVENTS
from orchestrator.domain.model.state_parts import (
    ActivityState,
    CompensationState,
    Encode,
    FanOutState,
    HumanTaskState,
    TimerState,
    WaitState,
    activity_dict,
    activity_from,
    activity_json,
    compensation_from,
    dumps_sorted,
    fan_out_from,
    human_dict,
    human_from,
    slots_dict,
    wait_from,
)
from orchestrator.domain.model.vocabulary import ActivityStatus, WorkflowStatus

__all__ = [
    "ACTIVITY_STATUSES",
    "ATTENTION",
    "CLOSED_CORRELATIONS_WINDOW",
    "HUMAN_TASKS_WINDOW",
    "IN_FLIGHT",
    "SEEN_COMMANDS_WINDOW",
    "SIGNAL_COMMANDS_LIMIT",
    "STATUSES",
    "TERMINAL_STATUSES",
    "ActivityState",
    "CompensationState",
    "HumanTaskState",
    "TimerState",
    "WaitState",
    "WorkflowState",
    "remember_command",
]

RUNNING = WorkflowStatus.RUNNING
WAITING = WorkflowStatus.WAITING
NEEDS_ATTENTION = WorkflowStatus.NEEDS_ATTENTION
COMPLETED = WorkflowStatus.COMPLETED
FAILED = WorkflowStatus.FAILED
CANCELLED = WorkflowStatus.CANCELLED
STATUSES = tuple(WorkflowStatus)
TERMINAL_STATUSES = frozenset(s for s in WorkflowStatus if s.is_terminal)

ACTIVITY_STATUSES = tuple(ActivityStatus)
IN_FLIGHT = frozenset(
    {
        ActivityStatus.SCHEDULED,
        ActivityStatus.BACKOFF,
        ActivityStatus.QUERYING,
        ActivityStatus.ATTENTION,
        ActivityStatus.DEAD_LETTERED,
        ActivityStatus.RESOLVING,
    }
)
#: Activity statuses that put the run in ``needs_attention``.
ATTENTION = frozenset({ActivityStatus.ATTENTION, ActivityStatus.DEAD_LETTERED})

#: How many recorded command ids a run remembers for deduplication (see the module doc).
SEEN_COMMANDS_WINDOW = 1000
#: How many signal command ids a workflow remembers for its whole life: one per recorded
#: signal event, so no run's history can hold more (docs/limits.md).
SIGNAL_COMMANDS_LIMIT = MAX_HISTORY_EVENTS
#: How many human tasks a run remembers (the open one and the latest decided ones:
#: a repeated decision answers from them).
HUMAN_TASKS_WINDOW = 100
#: How many closed correlated waits a run remembers (a late signal for one is refused).
CLOSED_CORRELATIONS_WINDOW = 1000

_FORMAT = 1


def remember_command(seen: tuple[str, ...], command_id: str) -> tuple[str, ...]:
    """``seen`` with ``command_id`` appended, keeping the newest ``SEEN_COMMANDS_WINDOW``."""
    if command_id in seen:
        return seen
    if len(seen) >= SEEN_COMMANDS_WINDOW:
        return (*seen[len(seen) - SEEN_COMMANDS_WINDOW + 1 :], command_id)
    return (*seen, command_id)


@dataclass
class WorkflowState:
    """Everything the decider needs about one run; JSON round-trips for snapshots."""

    workflow_id: str
    run_id: str
    name: str
    version: int
    digest: str
    input_json: str
    seq: int = 0
    status: WorkflowStatus = RUNNING
    current_state: str | None = None
    visit: int = 0
    visits: dict[str, int] = field(default_factory=dict)
    #: Steps of the current visit not completed yet.
    steps_remaining: set[str] = field(default_factory=set)
    wait: WaitState | None = None
    activities: dict[str, ActivityState] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    #: Latest result per step name (JSON text).
    step_results: dict[str, str] = field(default_factory=dict)
    #: Highest logical attempt used per activity type (for idempotency keys).
    logical_attempts: dict[str, int] = field(default_factory=dict)
    timers: dict[str, TimerState] = field(default_factory=dict)
    #: Signals received but not consumed by a wait yet: (name, payload_json), FIFO.
    inbox: tuple[tuple[str, str], ...] = ()
    #: Correlated signals that came before their wait: (name, correlation, payload_json).
    correlated_inbox: tuple[tuple[str, str, str], ...] = ()
    #: Correlated waits that closed, newest last (a late signal for one is refused).
    closed_correlations: tuple[tuple[str, str], ...] = ()
    #: Human tasks by id: the open one and the latest ``HUMAN_TASKS_WINDOW`` closed ones.
    human_tasks: dict[str, HumanTaskState] = field(default_factory=dict)
    #: Seq of the event before this run's first (0 for a workflow's first run; a
    #: continued run starts after its ``WorkflowContinuedAsNew``).
    run_base_seq: int = 0
    #: Recorded times of the workflow's latest continues as new within the continue
    #: budget's window, oldest first, across its runs (docs/limits.md).
    continue_times: tuple[int, ...] = ()
    #: Every signal payload received, by name, in arrival order.
    signals: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Ids of the latest commands that wrote events (redelivery -> no events), oldest
    #: first, at most ``SEEN_COMMANDS_WINDOW`` (see the module doc).
    seen_commands: tuple[str, ...] = ()
    #: Ids of every signal command the workflow recorded, oldest first, across its runs
    #: (a webhook re-sent days later is still a duplicate; see the module doc).
    signal_commands: dict[str, None] = field(default_factory=dict)
    output_json: str | None = None
    failure_reason: str | None = None
    cancel_reason: str | None = None
    #: Why the run itself needs an operator (a limit it reached), None when it does not.
    attention_reason: str | None = None
    #: Activity ids of completed compensable steps, in order of completion (what a
    #: failure or a cancel must undo, newest last).
    effects: tuple[str, ...] = ()
    #: The compensation under way (or finished), None when the run never compensated.
    compensation: CompensationState | None = None
    #: Each fan-out step's latest visit, by step name (docs/fan-out.md).
    fan_outs: dict[str, FanOutState] = field(default_factory=dict)
    #: A child run's parent and the parent's activity awaiting it (docs/child-workflows.md).
    parent_workflow_id: str | None = None
    parent_activity_id: str | None = None
    started_at: int = 0
    updated_at: int = 0
    #: Schema version the input was accepted under (0: unversioned; docs/schema-evolution.md).
    input_schema_version: int = 0
    #: Schema version of each step's latest result, when the handler declared one.
    result_versions: dict[str, int] = field(default_factory=dict)
    #: A stand-in held by a process without the run's definition: the keel.events offset
    #: of the first event it could not fold (None: a real state). Never serialised; a
    #: checkpoint neither writes it nor moves its partition's marker past that offset.
    unfolded_from: int | None = field(default=None, compare=False, repr=False)
    #: Per-run cache (e.g. the parsed input model); shared by clones, never serialised.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: Timer id by purpose (derived from ``timers``: an armed timer's purpose is unique).
    timer_index: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: Names of the containers this object may mutate (see the module contract).
    _owned: set[str] = field(default_factory=set, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.timers and not self.timer_index:
            self.timer_index = {t.purpose: tid for tid, t in self.timers.items()}

    # -- queries --------------------------------------------------------------------

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def has_seen(self, command_id: str) -> bool:
        """``command_id`` already wrote events: a recent command, or any signal."""
        return command_id in self.signal_commands or command_id in self.seen_commands

    def visit_tag(self) -> str:
        """The run-scoped tag of the current state visit's ids (``keys.visit_tag``); a
        run continued before ids were run-scoped keeps its visit's untagged ids while an
        activity of the visit is in flight under them, so no step is dispatched twice."""
        state = self.current_state or ""
        if self.run_base_seq:
            legacy = f"{state}#{self.visit}"
            if any(a.startswith(legacy + "/") for a in self.in_flight):
                return legacy
        return visit_tag(state, self.visit, self.run_base_seq)

    def needing_attention(self) -> list[str]:
        """Ids of the activities an operator must redrive or resolve, sorted."""
        return sorted(a for a in self.in_flight if self.activities[a].status in ATTENTION)

    def pending_timers(self) -> list[tuple[str, int]]:
        """``(timer_id, fire_at_ms)`` of every armed timer, earliest first."""
        return sorted(
            ((tid, t.fire_at) for tid, t in self.timers.items()), key=lambda x: (x[1], x[0])
        )

    def summary(self) -> WorkflowState:
        """What a finished run keeps: identity, outcome, sequence and seen command ids.

        Nothing a later command can change depends on the rest (a finished run only
        refuses or ignores commands), so the orchestrator keeps this in memory and in
        snapshots instead of the whole history-sized state.
        """
        if not self.is_terminal:
            raise ValueError(f"workflow '{self.workflow_id}' is {self.status}, not finished")
        return WorkflowState(
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            name=self.name,
            version=self.version,
            digest=self.digest,
            input_json=self.input_json,
            seq=self.seq,
            status=self.status,
            current_state=self.current_state,
            seen_commands=self.seen_commands,
            run_base_seq=self.run_base_seq,
            output_json=self.output_json,
            failure_reason=self.failure_reason,
            cancel_reason=self.cancel_reason,
            started_at=self.started_at,
            updated_at=self.updated_at,
            parent_workflow_id=self.parent_workflow_id,
            parent_activity_id=self.parent_activity_id,
        )

    # -- ownership --------------------------------------------------------------------

    def clone(self) -> WorkflowState:
        """A shallow copy that owns none of its containers (see the module contract)."""
        new = object.__new__(WorkflowState)
        new.__dict__.update(self.__dict__)
        new._owned = set()
        return new

    def seal(self) -> WorkflowState:
        """Give up ownership: from now on this state is shared and never mutated."""
        self._owned = set()
        return self

    def take(self, **containers: Any) -> None:
        """Set fresh containers this state owns from now on (nothing else holds them)."""
        self.__dict__.update(containers)
        self._owned.update(containers)

    def _own(self, name: str) -> Any:
        value = self.__dict__[name]
        if name not in self._owned:
            value = value.copy()
            self.__dict__[name] = value
            self._owned.add(name)
        return value

    def mut_activities(self) -> dict[str, ActivityState]:
        return self._own("activities")  # type: ignore[no-any-return]

    def mut_in_flight(self) -> set[str]:
        return self._own("in_flight")  # type: ignore[no-any-return]

    def remember_signal(self, command_id: str) -> None:
        """Remember a signal command for the workflow's life (oldest dropped past the limit)."""
        ids: dict[str, None] = self._own("signal_commands")
        ids[command_id] = None
        while len(ids) > SIGNAL_COMMANDS_LIMIT:
            del ids[next(iter(ids))]

    def mut_steps_remaining(self) -> set[str]:
        return self._own("steps_remaining")  # type: ignore[no-any-return]

    def arm_timer(self, timer_id: str, timer: TimerState) -> None:
        """Arm a timer; one armed earlier with the same purpose is replaced."""
        timers: dict[str, TimerState] = self._own("timers")
        index: dict[str, str] = self._own("timer_index")
        old = index.get(timer.purpose)
        if old is not None:
            timers.pop(old, None)
        timers[timer_id] = timer
        index[timer.purpose] = timer_id

    def drop_timer(self, timer_id: str) -> None:
        if timer_id not in self.timers:
            return
        timers: dict[str, TimerState] = self._own("timers")
        index: dict[str, str] = self._own("timer_index")
        purpose = timers.pop(timer_id).purpose
        if index.get(purpose) == timer_id:
            del index[purpose]

    def drop_timer_for(self, purpose: str) -> None:
        timer_id = self.timer_index.get(purpose)
        if timer_id is not None:
            self.drop_timer(timer_id)

    def clear_timers(self) -> None:
        if self.timers:
            self.take(timers={}, timer_index={})

    def mut_visits(self) -> dict[str, int]:
        return self._own("visits")  # type: ignore[no-any-return]

    def mut_step_results(self) -> dict[str, str]:
        return self._own("step_results")  # type: ignore[no-any-return]

    def mut_logical_attempts(self) -> dict[str, int]:
        return self._own("logical_attempts")  # type: ignore[no-any-return]

    def record_result(self, step: str, result_json: str, schema_version: int) -> None:
        """Keep a step's latest result and the schema version it was written under."""
        self.mut_step_results()[step] = result_json
        if schema_version or step in self.result_versions:
            versions: dict[str, int] = self._own("result_versions")
            versions[step] = schema_version

    def mut_fan_outs(self) -> dict[str, FanOutState]:
        return self._own("fan_outs")  # type: ignore[no-any-return]

    def mut_signals(self) -> dict[str, tuple[str, ...]]:
        return self._own("signals")  # type: ignore[no-any-return]

    def mut_human_tasks(self) -> dict[str, HumanTaskState]:
        return self._own("human_tasks")  # type: ignore[no-any-return]

    def open_human_task(self) -> HumanTaskState | None:
        """The task the current wait waits on, while it is open."""
        w = self.wait
        task = None if w is None or w.task_id is None else self.human_tasks.get(w.task_id)
        return task if task is not None and task.is_open else None

    # -- snapshots ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return self._to_dict(activities=True)

    def _to_dict(self, *, activities: bool) -> dict[str, Any]:
        d = {
            "format": _FORMAT,
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "name": self.name,
            "version": self.version,
            "digest": self.digest,
            "input_json": self.input_json,
            "seq": self.seq,
            "status": self.status,
            "current_state": self.current_state,
            "visit": self.visit,
            "visits": self.visits,
            "steps_remaining": sorted(self.steps_remaining),
            "wait": None if self.wait is None else slots_dict(self.wait),
            "activities": (
                [activity_dict(a) for a in self.activities.values()] if activities else None
            ),
            "in_flight": sorted(self.in_flight),
            "step_results": self.step_results,
            "logical_attempts": self.logical_attempts,
            "timers": {k: [t.fire_at, t.purpose] for k, t in self.timers.items()},
            "inbox": [list(x) for x in self.inbox],
            "signals": {k: list(v) for k, v in self.signals.items()},
            "seen_commands": list(self.seen_commands),
            "output_json": self.output_json,
            "failure_reason": self.failure_reason,
            "cancel_reason": self.cancel_reason,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
        }
        if not activities:
            del d["activities"]
        if self.attention_reason is not None:
            d["attention_reason"] = self.attention_reason
        # newer fields only when set, so the snapshots of older runs stay as they were
        if self.correlated_inbox:
            d["correlated_inbox"] = [list(x) for x in self.correlated_inbox]
        if self.closed_correlations:
            d["closed_correlations"] = [list(x) for x in self.closed_correlations]
        if self.human_tasks:
            d["human_tasks"] = [human_dict(t) for t in self.human_tasks.values()]
        if self.run_base_seq:
            d["run_base_seq"] = self.run_base_seq
        if self.input_schema_version:
            d["input_schema_version"] = self.input_schema_version
        if self.result_versions:
            d["result_versions"] = self.result_versions
        if self.effects:
            d["effects"] = list(self.effects)
        if self.signal_commands:
            d["signal_commands"] = list(self.signal_commands)
        if self.continue_times:
            d["continue_times"] = list(self.continue_times)
        if self.fan_outs:
            d["fan_outs"] = {k: slots_dict(v) for k, v in self.fan_outs.items()}
        if self.parent_workflow_id is not None:
            d["parent"] = [self.parent_workflow_id, self.parent_activity_id]
        if self.compensation is not None:
            c = self.compensation
            d["compensation"] = {
                "cause": c.cause,
                "reason": c.reason,
                "pending": list(c.pending),
                "current": c.current,
                "done": list(c.done),
                "failed": list(c.failed),
            }
        return d

    def to_json(self, encode: Encode | None = None) -> str:
        """``to_dict`` as sorted, compact JSON; each activity's part is encoded once.

        Activities are immutable, and a state is written after every batch that touches
        it (read model, snapshots), so the part of an unchanged activity is reused.
        ``"activities"`` sorts before every other key, so its part leads the object.
        ``encode`` lets the runtime bring a faster encoder than the standard library's.
        """
        encode = encode or dumps_sorted
        rest = encode(self._to_dict(activities=False))
        parts = ",".join([activity_json(a, encode) for a in self.activities.values()])
        return '{"activities":[' + parts + "]," + rest[1:]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkflowState:
        if d.get("format") != _FORMAT:
            raise ValueError(f"unsupported workflow state format {d.get('format')!r}")
        wait = d["wait"]
        seen = tuple(d["seen_commands"])[-SEEN_COMMANDS_WINDOW:]
        return cls(
            workflow_id=d["workflow_id"],
            run_id=d["run_id"],
            name=d["name"],
            version=d["version"],
            digest=d["digest"],
            input_json=d["input_json"],
            seq=d["seq"],
            status=WorkflowStatus(d["status"]),
            current_state=d["current_state"],
            visit=d["visit"],
            visits=dict(d["visits"]),
            steps_remaining=set(d["steps_remaining"]),
            wait=None if wait is None else wait_from(wait),
            activities={a["activity_id"]: activity_from(a) for a in d["activities"]},
            in_flight=set(d["in_flight"]),
            step_results=dict(d["step_results"]),
            logical_attempts=dict(d["logical_attempts"]),
            timers={k: TimerState(v[0], v[1]) for k, v in d["timers"].items()},
            inbox=tuple((x[0], x[1]) for x in d["inbox"]),
            signals={k: tuple(v) for k, v in d["signals"].items()},
            seen_commands=seen,
            output_json=d["output_json"],
            failure_reason=d["failure_reason"],
            cancel_reason=d["cancel_reason"],
            attention_reason=d.get("attention_reason"),
            correlated_inbox=tuple((x[0], x[1], x[2]) for x in d.get("correlated_inbox", ())),
            closed_correlations=tuple((x[0], x[1]) for x in d.get("closed_correlations", ())),
            human_tasks={t["task_id"]: human_from(t) for t in d.get("human_tasks", ())},
            run_base_seq=d.get("run_base_seq", 0),
            input_schema_version=d.get("input_schema_version", 0),
            result_versions=dict(d.get("result_versions", {})),
            effects=tuple(d.get("effects", ())),
            signal_commands=dict.fromkeys(d.get("signal_commands", ())),
            continue_times=tuple(d.get("continue_times", ())),
            compensation=compensation_from(d.get("compensation")),
            fan_outs={k: fan_out_from(v) for k, v in d.get("fan_outs", {}).items()},
            parent_workflow_id=d.get("parent", (None, None))[0],
            parent_activity_id=d.get("parent", (None, None))[1],
            started_at=d["started_at"],
            updated_at=d["updated_at"],
        )

    @classmethod
    def from_json(cls, s: str | bytes) -> WorkflowState:
        return cls.from_dict(json.loads(s))
