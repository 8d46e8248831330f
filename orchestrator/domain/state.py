"""The folded state of one workflow run: what ``evolve`` builds and snapshots store.

Contract (why evolve can be cheap and still safe): a :class:`WorkflowState` and every
container it holds are never mutated once another state may share them. ``evolve``
makes a shallow :meth:`WorkflowState.clone` and *replaces* the few containers an event
touches (copy-on-write), so the state passed in stays valid; the decider relies on
this to simulate its own events without copying the whole state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIVITY_STATUSES",
    "ATTENTION",
    "IN_FLIGHT",
    "STATUSES",
    "TERMINAL_STATUSES",
    "ActivityState",
    "TimerState",
    "WaitState",
    "WorkflowState",
]

RUNNING, WAITING, NEEDS_ATTENTION, COMPLETED, FAILED, CANCELLED = (
    "running",
    "waiting",
    "needs_attention",
    "completed",
    "failed",
    "cancelled",
)
#: ``needs_attention``: not finished, but an activity waits for an operator (it is
#: dead-lettered, or its outcome stayed unknown); a redrive or a resolution moves on.
STATUSES = (RUNNING, WAITING, NEEDS_ATTENTION, COMPLETED, FAILED, CANCELLED)
TERMINAL_STATUSES = frozenset({COMPLETED, FAILED, CANCELLED})

#: ``scheduled``: dispatched, awaiting a report; ``backoff``: failed, retry timer armed;
#: ``querying``: outcome unknown, its status query runs; ``attention``: outcome unknown
#: and the query could not tell, an operator must resolve it; ``dead_lettered``: out of
#: retries, an operator may redrive it; ``resolving``: settled within the decision that
#: is folding it (never seen between decisions); ``completed`` / ``failed``: final;
#: ``cancelled``: abandoned (state left or run ended).
ACTIVITY_STATUSES = (
    "scheduled",
    "backoff",
    "querying",
    "attention",
    "dead_lettered",
    "resolving",
    "completed",
    "failed",
    "cancelled",
)
IN_FLIGHT = frozenset(
    {"scheduled", "backoff", "querying", "attention", "dead_lettered", "resolving"}
)
#: Activity statuses that put the run in ``needs_attention``.
ATTENTION = frozenset({"attention", "dead_lettered"})

_FORMAT = 1


@dataclass(frozen=True, slots=True)
class ActivityState:
    """One activity (business intent) and its latest physical attempt."""

    activity_id: str
    activity_type: str
    step: str
    state: str
    visit: int
    input_json: str
    logical_attempt: int
    attempt: int
    idempotency_key: str
    status: str = "scheduled"
    result_json: str | None = None
    failure_class: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    #: The activity whose outcome this status query establishes (None: a step's activity).
    parent: str | None = None
    #: ``recorded_at`` of the first dispatch of this logical attempt (or of the last
    #: redrive/resolution): the start of ``RetryPolicy.max_elapsed``.
    first_dispatch_at: int = 0
    #: Attempts used before the current retry budget began (a redrive starts a new one).
    budget_base: int = 0
    #: Message ids of the heartbeats of the current attempt (the first: it started).
    heartbeats: frozenset[str] = frozenset()
    #: Attempts that timed out and whose late report, if any, is not recorded yet.
    timed_out: tuple[int, ...] = ()

    @property
    def started(self) -> bool:
        return bool(self.heartbeats)


@dataclass(frozen=True, slots=True)
class TimerState:
    fire_at: int
    purpose: str


@dataclass(frozen=True, slots=True)
class WaitState:
    """The wait of the current state visit.

    It is *active* once all steps of the visit completed; ``satisfied`` once its timer
    fired, its signal arrived (``payload_json``) or its timeout fired (``timed_out``).
    """

    kind: str  # "timer" | "signal"
    signal_name: str | None = None
    timer_id: str | None = None
    satisfied: bool = False
    timed_out: bool = False
    payload_json: str | None = None


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
    status: str = RUNNING
    current_state: str | None = None
    visit: int = 0
    visits: dict[str, int] = field(default_factory=dict)
    #: Steps of the current visit not completed yet.
    steps_remaining: frozenset[str] = frozenset()
    wait: WaitState | None = None
    activities: dict[str, ActivityState] = field(default_factory=dict)
    in_flight: frozenset[str] = frozenset()
    #: Latest result per step name (JSON text).
    step_results: dict[str, str] = field(default_factory=dict)
    #: Highest logical attempt used per activity type (for idempotency keys).
    logical_attempts: dict[str, int] = field(default_factory=dict)
    timers: dict[str, TimerState] = field(default_factory=dict)
    #: Signals received but not consumed by a wait yet: (name, payload_json), FIFO.
    inbox: tuple[tuple[str, str], ...] = ()
    #: Every signal payload received, by name, in arrival order.
    signals: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Message ids of signal/cancel commands already recorded (redelivery -> no events).
    seen_commands: frozenset[str] = frozenset()
    output_json: str | None = None
    failure_reason: str | None = None
    cancel_reason: str | None = None
    started_at: int = 0
    updated_at: int = 0
    #: Per-run cache (e.g. the parsed input model); shared by clones, never serialised.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- queries --------------------------------------------------------------------

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

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
            output_json=self.output_json,
            failure_reason=self.failure_reason,
            cancel_reason=self.cancel_reason,
            started_at=self.started_at,
            updated_at=self.updated_at,
        )

    def clone(self) -> WorkflowState:
        """A shallow copy (containers shared; see the module contract)."""
        new = object.__new__(WorkflowState)
        new.__dict__.update(self.__dict__)
        return new

    # -- snapshots ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
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
            "wait": None if self.wait is None else _slots_dict(self.wait),
            "activities": [_activity_dict(a) for a in self.activities.values()],
            "in_flight": sorted(self.in_flight),
            "step_results": self.step_results,
            "logical_attempts": self.logical_attempts,
            "timers": {k: [t.fire_at, t.purpose] for k, t in self.timers.items()},
            "inbox": [list(x) for x in self.inbox],
            "signals": {k: list(v) for k, v in self.signals.items()},
            "seen_commands": sorted(self.seen_commands),
            "output_json": self.output_json,
            "failure_reason": self.failure_reason,
            "cancel_reason": self.cancel_reason,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkflowState:
        if d.get("format") != _FORMAT:
            raise ValueError(f"unsupported workflow state format {d.get('format')!r}")
        wait = d["wait"]
        return cls(
            workflow_id=d["workflow_id"],
            run_id=d["run_id"],
            name=d["name"],
            version=d["version"],
            digest=d["digest"],
            input_json=d["input_json"],
            seq=d["seq"],
            status=d["status"],
            current_state=d["current_state"],
            visit=d["visit"],
            visits=dict(d["visits"]),
            steps_remaining=frozenset(d["steps_remaining"]),
            wait=None if wait is None else WaitState(**wait),
            activities={a["activity_id"]: _activity_from(a) for a in d["activities"]},
            in_flight=frozenset(d["in_flight"]),
            step_results=dict(d["step_results"]),
            logical_attempts=dict(d["logical_attempts"]),
            timers={k: TimerState(v[0], v[1]) for k, v in d["timers"].items()},
            inbox=tuple((x[0], x[1]) for x in d["inbox"]),
            signals={k: tuple(v) for k, v in d["signals"].items()},
            seen_commands=frozenset(d["seen_commands"]),
            output_json=d["output_json"],
            failure_reason=d["failure_reason"],
            cancel_reason=d["cancel_reason"],
            started_at=d["started_at"],
            updated_at=d["updated_at"],
        )

    @classmethod
    def from_json(cls, s: str | bytes) -> WorkflowState:
        return cls.from_dict(json.loads(s))


def _slots_dict(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


def _activity_dict(act: ActivityState) -> dict[str, Any]:
    d = _slots_dict(act)
    d["heartbeats"] = sorted(act.heartbeats)
    d["timed_out"] = list(act.timed_out)
    return d


def _activity_from(d: dict[str, Any]) -> ActivityState:
    d = dict(d)
    d["heartbeats"] = frozenset(d.get("heartbeats", ()))
    d["timed_out"] = tuple(d.get("timed_out", ()))
    return ActivityState(**d)
