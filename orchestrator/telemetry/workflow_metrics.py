"""Which metric each folded event moves: the catalogue of Keel's metrics and the mapping
from a projector's committed batch to metric updates (docs/metrics.md).

Pure but for one bounded memory (:class:`StateClock`, when each run entered its state):
no registry, no exporter, no I/O, so the counts are unit-tested exactly
(``tests/unit/telemetry/test_workflow_metrics.py``). The live projector calls it once per
committed batch (``Projection._record_metrics``, after the guarded write); it folds each
event once and skips what the read model already holds, so a replayed batch counts
nothing twice and a rebuild counts nothing at all. Labels are kept low-cardinality:
workflow name, state, activity type, failure class, cause, task name; never an id.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from orchestrator.domain.history.unknown_outcomes import (
    OutcomeFold,
    Settled,
    Unknown,
    found_in,
    query_parent,
)
from orchestrator.domain.model.keys import is_compensation
from orchestrator.domain.model.messages import TERMINAL_EVENT_NAMES, Envelope
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import (
    ActivityStatus,
    FailureClass,
    HumanTaskStatus,
    WorkflowStatus,
)
from orchestrator.records.history_entries import history_entry
from orchestrator.records.llm_usage import NodeUsage
from orchestrator.telemetry.metric_catalogue import Metric

__all__ = [
    "MetricUpdate",
    "StateClock",
    "batch_updates",
]


@dataclass(frozen=True, slots=True)
class MetricUpdate:
    """Add ``value`` to a counter, or observe it in a histogram."""

    metric: Metric
    labels: tuple[str, ...]
    value: float


class Cause(StrEnum):
    """Why a run ended (the ``cause`` label): a class, never the free-text reason."""

    NONE = "none"
    ACTIVITY_PERMANENT = "activity_permanent"
    ACTIVITY_RETRIES_EXHAUSTED = "activity_retries_exhausted"
    ACTIVITY_UNKNOWN = "activity_unknown"
    HUMAN_TASK = "human_task"
    DEFINITION = "definition"
    REQUESTED = "requested"
    HUMAN_TASK_EXPIRED = "human_task_expired"


class StepOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Breach(StrEnum):
    DECIDED_LATE = "decided_late"
    ESCALATED = "escalated"
    EXPIRED = "expired"


TIMEOUT_CLASS = "timeout"
#: The clock's mark of a run that began and has entered no state yet.
_NO_STATE = ""
EXPIRED = "expired"
#: The event types that move a metric; any other history line is not parsed at all.
COUNTED_TYPES = frozenset(
    {
        *TERMINAL_EVENT_NAMES,
        "WorkflowStarted",
        "WorkflowContinuedAsNew",
        "StateEntered",
        "ActivityScheduled",
        "ActivityCompleted",
        "ActivityFailed",
        "ActivityTimedOut",
        "ActivityDeadLettered",
        "ActivityResolved",
        "HumanTaskOpened",
        "HumanTaskDecided",
        "HumanTaskEscalated",
        "HumanTaskExpired",
        "CompensationStarted",
        "CompensationFailed",
    }
)
_TYPE_MARK = '"type":"'


class StateClock:
    """When each run entered its current state, as this process saw it (bounded, oldest
    forgotten first). A state left whose entry is not here (the process started or
    forgot it meanwhile) is counted as untimed, never guessed."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._entered: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def enter(self, workflow_id: str, state: str, at_ms: int) -> tuple[str, int] | None:
        """Record the entry; returns the state left and when it was entered, if known."""
        left = self._entered.pop(workflow_id, None)
        self._entered[workflow_id] = (state, at_ms)
        while len(self._entered) > self.size:
            self._entered.popitem(last=False)
        return left

    def leave(self, workflow_id: str) -> tuple[str, int] | None:
        return self._entered.pop(workflow_id, None)

    def __len__(self) -> int:
        return len(self._entered)


def _entries(events: Iterable[Envelope[Any] | str]) -> list[dict[str, Any]]:
    """The history entries among ``events`` that move a metric. A history line is
    parsed only when its type is counted (its type is the second key of the line)."""
    found = []
    for event in events:
        if isinstance(event, str):
            at = event.find(_TYPE_MARK)
            if at < 0:
                continue
            start = at + len(_TYPE_MARK)
            if event[start : event.find('"', start)] not in COUNTED_TYPES:
                continue
            entry = _parsed(event)
        elif event.type in COUNTED_TYPES:
            entry = history_entry(event)
        else:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("data"), dict):
            found.append(entry)
    return found


def _parsed(line: str) -> Any:
    """A history line parsed (orjson; the standard library for what orjson refuses, such
    as an integer past 64 bits); None if it is not JSON."""
    try:
        return orjson.loads(line)
    except ValueError:
        try:
            return json.loads(line)
        except ValueError:
            return None


def _seconds(end_ms: object, start_ms: object) -> float | None:
    if not isinstance(end_ms, int) or not isinstance(start_ms, int) or start_ms <= 0:
        return None
    return max(0, end_ms - start_ms) / 1000


class _Batch:
    """The updates of one run's newly folded events."""

    def __init__(self, wf: str, state: WorkflowState, clock: StateClock) -> None:
        self.wf, self.state, self.clock = wf, state, clock
        self.name = state.name
        self.out: list[MetricUpdate] = []
        self.types: dict[str, str] = {}
        self.last_class: dict[str, str] = {}
        self.opened_at: dict[str, tuple[str, int, int]] = {}
        self.outcomes = OutcomeFold(self.timed_out_before)

    def add(self, metric: Metric, *labels: str, value: float = 1) -> None:
        self.out.append(MetricUpdate(metric, (self.name, *labels), value))

    def timed_out_before(self, activity_id: str, attempt: int) -> bool:
        """Whether an attempt timed out in an earlier batch (the run's state knows)."""
        act = self.state.activities.get(activity_id)
        return act is not None and attempt in act.timed_out

    def outcome(self, counted: Unknown | Settled | None) -> None:
        """The metric of an unknown outcome, or of its settlement, the fold counted."""
        if isinstance(counted, Unknown):
            self.add(Metric.UNKNOWN_OUTCOMES, self.activity_type(counted.activity_id))
        elif isinstance(counted, Settled):
            kind = self.activity_type(counted.activity_id)
            self.add(Metric.UNKNOWN_RESOLUTIONS, kind, counted.by, counted.resolution)

    def activity_type(self, activity_id: str) -> str:
        found = self.types.get(activity_id)
        if found is None:
            act = self.state.activities.get(activity_id)
            found = act.activity_type if act is not None else ""
        return found or "unknown"

    def leave_state(self, at_ms: int, entered: tuple[str, int] | None) -> None:
        if entered is None:
            self.add(Metric.STATE_UNTIMED)
            return
        state, since = entered
        if state != _NO_STATE:
            self.add(Metric.STATE_SECONDS, state, value=max(0, at_ms - since) / 1000)

    def fold(self, entry: dict[str, Any]) -> None:
        kind: str = entry["type"]
        data: dict[str, Any] = entry["data"]
        at = entry.get("recorded_at")
        at_ms = at if isinstance(at, int) else 0
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, data, at_ms)
            return
        if kind in TERMINAL_EVENT_NAMES:  # the run's status is the one it ended with
            self.finish(self.state.status, at_ms)

    def finish(self, status: str, at_ms: int) -> None:
        left = self.clock.leave(self.wf)
        if left is not None or self.state.current_state is not None:
            self.leave_state(at_ms, left)
        self.add(Metric.WORKFLOWS_FINISHED, str(status), str(self.cause(status)))
        took = _seconds(at_ms, self.state.started_at)
        if took is not None:
            self.add(Metric.DURATION_SECONDS, str(status), value=took)

    def cause(self, status: str) -> Cause | str:
        s = self.state
        if status == WorkflowStatus.COMPLETED:
            return Cause.NONE
        if s.compensation is not None and status in (
            WorkflowStatus.COMPENSATED,
            WorkflowStatus.COMPENSATION_FAILED,
        ):
            return s.compensation.cause
        if status == WorkflowStatus.FAILED:
            return self.failure_cause()
        expired = any(t.status == HumanTaskStatus.EXPIRED for t in s.human_tasks.values())
        return Cause.HUMAN_TASK_EXPIRED if expired else Cause.REQUESTED  # cancelled

    def failure_cause(self) -> Cause:
        failed = [
            a
            for a in self.state.activities.values()
            if a.status in (ActivityStatus.FAILED, ActivityStatus.DEAD_LETTERED)
            and not is_compensation(a.activity_id)
            and a.parent is None
        ]
        if failed:
            cls = failed[-1].failure_class
            if cls == FailureClass.PERMANENT:
                return Cause.ACTIVITY_PERMANENT
            if cls == FailureClass.UNKNOWN:
                return Cause.ACTIVITY_UNKNOWN
            return Cause.ACTIVITY_RETRIES_EXHAUSTED
        if any(t.decision is not None for t in self.state.human_tasks.values()):
            return Cause.HUMAN_TASK
        return Cause.DEFINITION


def _started(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    b.clock.enter(b.wf, _NO_STATE, at_ms)  # (a reused id: nothing of the earlier run)
    b.add(Metric.WORKFLOWS_STARTED)


def _continued(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    b.leave_state(at_ms, b.clock.enter(b.wf, _NO_STATE, at_ms))
    b.add(Metric.WORKFLOWS_CONTINUED)


def _state_entered(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    b.leave_state(at_ms, b.clock.enter(b.wf, str(data.get("state", "")), at_ms))


def _scheduled(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    aid = str(data.get("activity_id", ""))
    kind = str(data.get("activity_type", "")) or "unknown"
    b.types[aid] = kind
    if is_compensation(aid):
        b.add(Metric.COMPENSATION_ATTEMPTS, kind)
        return
    b.add(Metric.ACTIVITY_ATTEMPTS, kind)
    attempt = data.get("attempt")
    if isinstance(attempt, int):
        b.outcome(b.outcomes.scheduled(aid, attempt))
    if isinstance(attempt, int) and attempt > 1:
        before = b.last_class.get(aid)
        if before is None:
            act = b.state.activities.get(aid)
            before = (act.failure_class if act is not None else None) or "unknown"
        b.add(Metric.ACTIVITY_RETRIES, kind, before)


def _failed(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    aid = str(data.get("activity_id", ""))
    cls = str(data.get("failure_class", "")) or "unknown"
    b.last_class[aid] = cls
    kind = b.activity_type(aid)
    b.add(Metric.ACTIVITY_FAILURES, kind, cls)
    attempt = data.get("attempt")
    if isinstance(attempt, int):
        b.outcome(b.outcomes.failed(aid, attempt, cls))


def _timed_out(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    aid = str(data.get("activity_id", ""))
    b.last_class[aid] = TIMEOUT_CLASS
    attempt = data.get("attempt")
    if isinstance(attempt, int):
        b.outcomes.timed_out(aid, attempt)
    b.add(Metric.ACTIVITY_TIMEOUTS, b.activity_type(aid), str(data.get("timeout", "")))


def _dead_lettered(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    b.add(Metric.ACTIVITY_DEAD_LETTERED, b.activity_type(str(data.get("activity_id", ""))))


def _completed(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    aid = str(data.get("activity_id", ""))
    if is_compensation(aid):
        b.add(Metric.COMPENSATION_STEPS, b.activity_type(aid), StepOutcome.SUCCEEDED)
    elif query_parent(aid) is not None:  # a status query answered
        b.outcome(b.outcomes.answered(aid, found_in(data.get("result"))))


def _resolved(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    aid = str(data.get("activity_id", ""))
    b.outcome(b.outcomes.resolved(aid, str(data.get("resolution", ""))))


def _task_opened(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    name = str(data.get("task_name", ""))
    due = data.get("due_at")
    b.opened_at[str(data.get("task_id", ""))] = (name, at_ms, due if isinstance(due, int) else 0)
    b.add(Metric.HUMAN_TASKS_OPENED, name)


def _task(b: _Batch, task_id: str) -> tuple[str, int, int] | None:
    """(task name, opened at, due at) of a task opened in this batch or before it."""
    found = b.opened_at.get(task_id)
    if found is None:
        t = b.state.human_tasks.get(task_id)
        if t is not None:
            found = (t.task_name, t.opened_at, t.due_at)
    return found


def _task_decided(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    task = _task(b, str(data.get("task_id", "")))
    if task is None:
        return
    name, opened, due = task
    decided = data.get("decided_at")
    decided_at = decided if isinstance(decided, int) and decided > 0 else at_ms
    waited = _seconds(decided_at, opened)
    if waited is not None:
        b.add(Metric.HUMAN_WAIT_SECONDS, name, str(data.get("decision", "")), value=waited)
    if due > 0 and decided_at > due:
        b.add(Metric.HUMAN_SLA_BREACHES, name, Breach.DECIDED_LATE)


def _task_escalated(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    task = _task(b, str(data.get("task_id", "")))
    b.add(Metric.HUMAN_SLA_BREACHES, task[0] if task else "unknown", Breach.ESCALATED)


def _task_expired(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    task = _task(b, str(data.get("task_id", "")))
    name = task[0] if task else "unknown"
    b.add(Metric.HUMAN_SLA_BREACHES, name, Breach.EXPIRED)
    waited = _seconds(at_ms, task[1]) if task else None
    if waited is not None:
        b.add(Metric.HUMAN_WAIT_SECONDS, name, EXPIRED, value=waited)


def _compensation_started(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    b.add(Metric.COMPENSATIONS_STARTED, str(data.get("cause", "")))


def _compensation_failed(b: _Batch, data: dict[str, Any], at_ms: int) -> None:
    aid = str(data.get("activity_id", ""))
    undo = aid if is_compensation(aid) else aid + "/undo"
    b.add(Metric.COMPENSATION_STEPS, b.activity_type(undo), StepOutcome.FAILED)


_HANDLERS = {
    "WorkflowStarted": _started,
    "WorkflowContinuedAsNew": _continued,
    "StateEntered": _state_entered,
    "ActivityScheduled": _scheduled,
    "ActivityCompleted": _completed,
    "ActivityFailed": _failed,
    "ActivityTimedOut": _timed_out,
    "ActivityDeadLettered": _dead_lettered,
    "ActivityResolved": _resolved,
    "HumanTaskOpened": _task_opened,
    "HumanTaskDecided": _task_decided,
    "HumanTaskEscalated": _task_escalated,
    "HumanTaskExpired": _task_expired,
    "CompensationStarted": _compensation_started,
    "CompensationFailed": _compensation_failed,
}


def llm_updates(usages: Iterable[NodeUsage], workflow_name: str) -> list[MetricUpdate]:
    """The LLM counters of a run's newly completed nodes (the same usages the read model
    sums, ``orchestrator/records/llm_usage.py``)."""
    out = []
    for u in usages:
        labels = (workflow_name, u.activity_type)
        out += [
            MetricUpdate(Metric.LLM_TOKENS, (*labels, "prompt"), u.prompt_tokens),
            MetricUpdate(Metric.LLM_TOKENS, (*labels, "completion"), u.completion_tokens),
            MetricUpdate(Metric.LLM_COST, labels, u.cost_usd),
            MetricUpdate(Metric.LLM_CALLS, labels, u.calls),
            MetricUpdate(Metric.LLM_NODES, labels, 1),
        ]
        if u.cache_hit:
            out.append(MetricUpdate(Metric.LLM_CACHE_HITS, labels, 1))
    return out


def batch_updates(
    updates: Mapping[str, tuple[WorkflowState, Sequence[Envelope[Any] | str], str | None]],
    clock: StateClock,
    usages: Mapping[str, list[NodeUsage]] | None = None,
) -> list[MetricUpdate]:
    """The metric updates of one committed projector batch: per run, its new state and
    the events newly folded into it (envelopes or their history lines), in order."""
    out: list[MetricUpdate] = []
    for wf, (state, events, _) in updates.items():
        batch = _Batch(wf, state, clock)
        for entry in _entries(events):
            batch.fold(entry)
        out += batch.out
        found = usages.get(wf) if usages else None
        if found:
            out += llm_updates(found, state.name)
    return out
