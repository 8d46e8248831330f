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
    "STATUSES",
    "TERMINAL_STATUSES",
    "ActivityState",
    "TimerState",
    "WaitState",
    "WorkflowState",
]

RUNNING, WAITING, COMPLETED, FAILED, CANCELLED = (
    "running",
    "waiting",
    "completed",
    "failed",
    "cancelled",
)
STATUSES = (RUNNING, WAITING, COMPLETED, FAILED, CANCELLED)
TERMINAL_STATUSES = frozenset({COMPLETED, FAILED, CANCELLED})

#: ``scheduled``: dispatched, awaiting a report; ``backoff``: failed, retry timer armed;
#: ``completed`` / ``failed``: final; ``cancelled``: abandoned (state left or run ended).
ACTIVITY_STATUSES = ("scheduled", "backoff", "completed", "failed", "cancelled")
IN_FLIGHT = frozenset({"scheduled", "backoff"})

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
            "activities": [_slots_dict(a) for a in self.activities.values()],
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
            activities={a["activity_id"]: ActivityState(**a) for a in d["activities"]},
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
