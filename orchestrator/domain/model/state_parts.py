"""The parts of a run's state (an activity, a human task, a compensation, a timer, a
wait) and their JSON forms, which ``WorkflowState.to_dict``/``from_dict`` build on.

Every part is frozen: a state shares them with the states it was cloned from
(``orchestrator/domain/model/state.py``), so an activity's JSON can be cached by identity.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.model.frozen_init import fast_init
from orchestrator.domain.model.vocabulary import ActivityStatus, HumanTaskStatus, WaitKind


@fast_init
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
    status: ActivityStatus = ActivityStatus.SCHEDULED
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
    #: Heartbeats recorded for the current attempt (the first: it started); heartbeats
    #: are coalesced, so this counts events, not the worker's reports.
    heartbeat_count: int = 0
    #: Command id of the last heartbeat recorded (its redelivery writes nothing).
    last_heartbeat: str | None = None
    #: Attempts that timed out and whose late report, if any, is not recorded yet.
    timed_out: tuple[int, ...] = ()
    #: The current attempt's ``@side_effect`` handler reported its start: a start-to-close
    #: or heartbeat timeout from now on leaves its outcome unknown (it may have written).
    effect_started: bool = False

    @property
    def started(self) -> bool:
        return self.heartbeat_count > 0


@fast_init
@dataclass(frozen=True, slots=True)
class HumanTaskState:
    """One human task of the run (docs/human-tasks.md): its recorded facts, folded.

    ``roles`` are the qualifications that may decide it now (the required role, then
    each role an escalation added); ``owner`` is whom it is assigned to now.
    """

    task_id: str
    task_name: str
    state: str
    visit: int
    owner: str
    role: str
    roles: tuple[str, ...]
    evidence_digest: str
    operation_digest: str
    token_hash: str
    opened_at: int
    due_at: int
    expires_at: int
    status: HumanTaskStatus = HumanTaskStatus.OPEN
    reminders: int = 0
    level: int = 0
    decision: str | None = None
    actor: str | None = None
    decided_at: int | None = None
    #: What the expiry did (``reject``, ``cancel`` or a state name), once expired.
    expiry_outcome: str | None = None
    #: A correction task's approved data, as recorded (canonical JSON; "": none).
    correction_json: str = ""

    @property
    def is_open(self) -> bool:
        return self.status == HumanTaskStatus.OPEN


@fast_init
@dataclass(frozen=True, slots=True)
class CompensationState:
    """The compensation of a run that failed or was cancelled (docs/sagas.md).

    ``pending``: activity ids whose effects are still to undo, next first; ``current``:
    the one whose compensation runs now; ``done`` / ``failed``: undone / given up.
    """

    cause: str
    reason: str
    pending: tuple[str, ...] = ()
    current: str | None = None
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class FanOutState:
    """A fan-out step's latest visit (docs/fan-out.md): its item ``i`` is activity
    ``f"{prefix}[{i}]"``; ``ended`` items completed or failed for good (``failures``,
    their indexes in order); ``dispatched`` items were scheduled once."""

    prefix: str
    items: int
    items_digest: str
    dispatched: int = 0
    ended: int = 0
    failures: tuple[int, ...] = ()

    @property
    def in_flight(self) -> int:
        return self.dispatched - self.ended

    def item_id(self, index: int) -> str:
        return f"{self.prefix}[{index}]"

    def index_of(self, activity_id: str) -> int | None:
        """The item index of ``activity_id``, None when it is not an item of this visit."""
        head = self.prefix + "["
        if not (activity_id.startswith(head) and activity_id.endswith("]")):
            return None
        digits = activity_id[len(head) : -1]
        return int(digits) if digits.isdigit() else None


@fast_init
@dataclass(frozen=True, slots=True)
class TimerState:
    fire_at: int
    #: The wire form of a :class:`~orchestrator.domain.model.vocabulary.TimerPurpose`.
    purpose: str


@fast_init
@dataclass(frozen=True, slots=True)
class WaitState:
    """The wait of the current state visit.

    It is *active* once all steps of the visit completed; ``satisfied`` once its timer
    fired, its signal arrived (``payload_json``) or its timeout fired (``timed_out``).
    """

    kind: WaitKind
    signal_name: str | None = None
    timer_id: str | None = None
    satisfied: bool = False
    timed_out: bool = False
    payload_json: str | None = None
    #: The wait answers only signals carrying a correlation (its value once opened).
    correlated: bool = False
    correlation: str | None = None
    #: A human wait's task, once opened, and what ended it (approve, reject or expiry).
    task_id: str | None = None
    outcome: str | None = None


#: Sorted, compact JSON text of a plain value (``WorkflowState.to_json``'s encoder).
Encode = Callable[[Any], str]


def dumps_sorted(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


#: The JSON of recently written activities, by identity (the entry keeps the object
#: alive, so its id cannot be reused while cached), with the encoder that wrote it.
_ACTIVITY_JSON: dict[int, tuple[ActivityState, Encode, str]] = {}
_ACTIVITY_JSON_MAX = 8192


def activity_json(act: ActivityState, encode: Encode) -> str:
    hit = _ACTIVITY_JSON.get(id(act))
    if hit is not None and hit[0] is act and hit[1] is encode:
        return hit[2]
    text = encode(activity_dict(act))
    if len(_ACTIVITY_JSON) >= _ACTIVITY_JSON_MAX:
        _ACTIVITY_JSON.clear()
    _ACTIVITY_JSON[id(act)] = (act, encode, text)
    return text


def slots_dict(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


def activity_dict(act: ActivityState) -> dict[str, Any]:
    d = slots_dict(act)
    d["timed_out"] = list(act.timed_out)
    return d


def activity_from(d: dict[str, Any]) -> ActivityState:
    d = dict(d)
    # snapshots before coalescing kept every heartbeat's command id
    legacy = d.pop("heartbeats", None)
    if "heartbeat_count" not in d:
        d["heartbeat_count"] = len(legacy or ())
    d["status"] = ActivityStatus(d.get("status", ActivityStatus.SCHEDULED))
    d["timed_out"] = tuple(d.get("timed_out", ()))
    return ActivityState(**d)


def human_dict(task: HumanTaskState) -> dict[str, Any]:
    d = slots_dict(task)
    d["roles"] = list(task.roles)
    return d


def human_from(d: dict[str, Any]) -> HumanTaskState:
    d = dict(d)
    d["roles"] = tuple(d["roles"])
    d["status"] = HumanTaskStatus(d["status"])
    return HumanTaskState(**d)


def compensation_from(d: dict[str, Any] | None) -> CompensationState | None:
    if d is None:
        return None
    return CompensationState(
        cause=d["cause"],
        reason=d["reason"],
        pending=tuple(d["pending"]),
        current=d["current"],
        done=tuple(d["done"]),
        failed=tuple(d["failed"]),
    )


def wait_from(d: dict[str, Any]) -> WaitState:
    d = dict(d)
    d["kind"] = WaitKind(d["kind"])
    return WaitState(**d)


def fan_out_from(d: dict[str, Any]) -> FanOutState:
    return FanOutState(**{**d, "failures": tuple(d.get("failures", ()))})
