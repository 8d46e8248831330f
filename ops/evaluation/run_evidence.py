"""What one run's history shows, for ``keel evaluate`` (docs/evaluation.md, "Evidence").

Everything here is read from the run's recorded events, never from a log: how it ended,
the states it went through, each activity completed (and any completed twice, or
scheduled again after it completed: a re-execution), retries by failure class, unknown
outcomes and the status queries that settled them (``orchestrator.domain.history.unknown_outcomes``,
the count the metrics keep), compensations and their result, the
time spent in each state and in each activity attempt, model tokens and cost, and each
human task's wait against its SLA. The state a run was in at a given time is its node
then: after a crash, the node it must recover at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ops.invoices.invoice_report import outcome_of
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.history.unknown_outcomes import SettledBy, outcomes_of, query_parent
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    ActivityTimedOut,
    CompensationStarted,
    HumanTaskDecided,
    HumanTaskExpired,
    HumanTaskOpened,
    StateEntered,
    WorkflowFailed,
    WorkflowMigrated,
    WorkflowStarted,
)
from orchestrator.domain.model.saga_messages import CompensationFailed, WorkflowCompensationFailed
from orchestrator.domain.model.vocabulary import FailureClass
from orchestrator.records.llm_usage import usages_of

__all__ = ["RunEvidence", "evidence_of"]


@dataclass
class RunEvidence:
    """One run, as its history shows it."""

    workflow_id: str
    outcome: str = "not started"
    ended: bool = False
    started_ms: int = 0
    ended_ms: int = 0
    #: The states entered, in order (a state visited twice appears twice).
    path: list[tuple[int, str]] = field(default_factory=list)
    completed: Counter[str] = field(default_factory=Counter)
    #: Activities completed twice, or scheduled again after they completed.
    re_executed: list[str] = field(default_factory=list)
    attempts: int = 0
    retries: Counter[str] = field(default_factory=Counter)
    unknown: int = 0
    settled_by_query: int = 0
    compensations: int = 0
    compensations_failed: int = 0
    state_s: dict[str, float] = field(default_factory=dict)
    activity_s: dict[str, list[float]] = field(default_factory=dict)
    model_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    #: Each human task decided or expired: (wait in s, SLA in s or 0, breached).
    human: list[tuple[float, float, bool]] = field(default_factory=list)
    #: Why it did not complete (a failed run's reason).
    reason: str = ""
    #: The last failed attempt: its activity type, error type and message.
    last_failure: str = ""
    #: Each wait for a retry: (the failed attempt, the next attempt or the run's end), ms.
    retry_waits: list[tuple[int, int]] = field(default_factory=list)
    #: The versions it ran on: the one it started on, then each it migrated to.
    versions: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return (self.ended_ms - self.started_ms) / 1000 if self.ended else 0.0

    @property
    def stopped_at(self) -> str:
        """Where it stopped (or is): its last state."""
        return self.path[-1][1] if self.path else ""

    @property
    def diagnosable(self) -> bool:
        """Its history names where it stopped and why: a state, and a reason (a failed
        run's, or its last failed attempt's). A run that completed with a wrong outcome
        names nothing: its history says it succeeded."""
        return bool(self.stopped_at and (self.reason or self.last_failure))

    @property
    def states(self) -> list[str]:
        return [s for _, s in self.path]

    def node_at(self, ms: int) -> str:
        """The state the run was in at ``ms`` ("" before it started or after it ended)."""
        if not self.path or ms < self.started_ms or (self.ended and ms >= self.ended_ms):
            return ""
        return next((s for at, s in reversed(self.path) if at <= ms), self.path[0][1])

    def in_flight_at(self, ms: int) -> bool:
        return self.started_ms <= ms and (not self.ended or ms < self.ended_ms)

    def differs_from(self, baseline: RunEvidence) -> str:
        """How this run's course differs from the fault-free run of the same input
        ("" when it went the same way): another path, or other activities completed."""
        if self.states != baseline.states:
            return f"path {' > '.join(self.states)} instead of {' > '.join(baseline.states)}"
        # A run undone by compensation abandons the steps still in flight beside the one
        # that failed: which of them completed first is timing, not recovery.
        undone = self.compensations > 0 or baseline.compensations > 0
        if not undone and set(self.completed) != set(baseline.completed):
            extra = sorted(set(self.completed) - set(baseline.completed))
            missing = sorted(set(baseline.completed) - set(self.completed))
            return f"activities completed: extra {extra}, missing {missing}"
        return ""


def evidence_of(workflow_id: str, envelopes: list[Any]) -> RunEvidence:
    """The evidence of one run from its envelopes (events and commands, in order)."""
    ev = RunEvidence(workflow_id)
    events = [e for e in envelopes if e.payload.KIND == "event"]
    if not events:
        return ev
    ev.started_ms = events[0].recorded_at
    ev.outcome = outcome_of(events)
    ev.violations = [str(v) for v in check_history(events)]
    end = events[-1]
    ev.ended = isinstance(end.payload, TERMINAL_EVENTS)
    ev.ended_ms = end.recorded_at if ev.ended else 0
    scheduled: dict[tuple[str, int], tuple[str, int]] = {}
    opened: dict[str, tuple[int, int]] = {}
    waiting: dict[str, int] = {}  # activity id -> its failed attempt, no next one yet
    moved_to = ""  # a migration re-enters the state it maps to: no new node on the path
    outcomes = outcomes_of(events)
    ev.unknown, ev.settled_by_query = outcomes.unknown, outcomes.settled[SettledBy.QUERY]
    for e in events:
        p, at = e.payload, e.recorded_at
        if isinstance(p, WorkflowStarted):
            ev.versions.append(p.version)
        elif isinstance(p, WorkflowMigrated):
            ev.versions.append(p.to_version)
            moved_to = p.to_state
        elif isinstance(p, StateEntered):
            if p.state == moved_to and ev.path and ev.path[-1][1] == p.state:
                moved_to = ""
                continue
            ev.path.append((at, p.state))
        elif isinstance(p, ActivityScheduled):
            ev.attempts += 1
            if p.activity_id in waiting:
                ev.retry_waits.append((waiting.pop(p.activity_id), at))
            if p.activity_id in ev.completed and p.activity_id not in ev.re_executed:
                ev.re_executed.append(p.activity_id)
            scheduled[(p.activity_id, p.attempt)] = (p.activity_type, at)
        elif isinstance(p, ActivityCompleted):
            if query_parent(p.activity_id) is not None:  # a status query: no node
                continue
            ev.completed[p.activity_id] += 1
            if ev.completed[p.activity_id] == 2 and p.activity_id not in ev.re_executed:
                ev.re_executed.append(p.activity_id)
            _timed(ev, scheduled.get((p.activity_id, p.attempt)), at)
        elif isinstance(p, ActivityFailed):
            ev.retries[p.failure_class] += 1
            of = scheduled.get((p.activity_id, p.attempt))
            _timed(ev, of, at)
            kind = of[0] if of is not None else p.activity_id
            ev.last_failure = f"{kind}: {p.error_type}: {p.message[:300]}"
            if p.failure_class != FailureClass.PERMANENT:  # it waits for nothing
                waiting.setdefault(p.activity_id, at)
        elif isinstance(p, ActivityTimedOut):
            ev.retries["timed_out"] += 1
        elif isinstance(p, CompensationStarted):
            ev.compensations += 1
        elif isinstance(p, CompensationFailed):
            ev.compensations_failed += 1
        elif isinstance(p, HumanTaskOpened):
            opened[p.task_id] = (at, p.due_at)
        elif isinstance(p, HumanTaskDecided | HumanTaskExpired) and p.task_id in opened:
            at_open, due = opened[p.task_id]
            sla = (due - at_open) / 1000 if due else 0.0
            breached = isinstance(p, HumanTaskExpired) or (due > 0 and at > due)
            ev.human.append(((at - at_open) / 1000, sla, breached))
        elif isinstance(p, WorkflowFailed | WorkflowCompensationFailed):
            ev.reason = p.reason
    ev.retry_waits += [(since, end.recorded_at) for since in waiting.values()]
    bounds = [at for at, _ in ev.path] + [end.recorded_at]
    for (at, state), until in zip(ev.path, bounds[1:], strict=True):
        ev.state_s[state] = ev.state_s.get(state, 0.0) + (until - at) / 1000
    for u in usages_of(events, {}):
        ev.model_calls += u.calls
        ev.tokens += u.total_tokens
        ev.cost_usd += u.cost_usd
    return ev


def _timed(ev: RunEvidence, scheduled: tuple[str, int] | None, at: int) -> None:
    if scheduled is not None:
        activity_type, began = scheduled
        ev.activity_s.setdefault(activity_type, []).append((at - began) / 1000)
