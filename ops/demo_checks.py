"""What ``keel demo`` proves, computed from the event store and the ledger's own books.

Pure functions over decoded ``keel.events`` envelopes, so the invariants can be tested on
crafted histories without a broker. A run's history must have contiguous ``seq`` from 1,
no repeated event, exactly one terminal event and nothing after it, and the output the
demo expects; it must keep every invariant of ``orchestrator.domain.history.invariants`` (the
checker ``keel workflow verify`` runs: each attempt scheduled and completed once, one
logical attempt per idempotency key, human decisions that match their task, ...); the
ledger must hold at most one posting per idempotency key, and every posting must belong
to a completed run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.domain.history.invariants import Invariant, check_history
from orchestrator.domain.history.unknown_outcomes import OutcomeFold, SettledBy, query_parent
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    ActivityScheduled,
    ActivityTimedOut,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
)
from orchestrator.domain.model.vocabulary import TimeoutKind


class Kind(StrEnum):
    """The bundled workflows the demo runs."""

    CHECKS = "parallel_checks"
    REVIEW = "document_review"
    INVOICE = "invoice_posting"


@dataclass(frozen=True)
class Expectation:
    """What one run must end with: its kind and output (None: the ledger decides)."""

    kind: Kind
    output: dict[str, Any] | None = None


@dataclass
class Findings:
    """Counts for the final table, and every invariant that failed."""

    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    retries: int = 0
    timeouts: int = 0
    unknown_outcomes: int = 0
    reconciled_by_query: int = 0
    postings: int = 0
    duplicate_effects: int = 0
    not_terminal: list[str] = field(default_factory=list)
    unsound_histories: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    reconciled_runs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def exit_code(self) -> int:
        """0 when every invariant holds, else 1."""
        return 0 if self.ok else 1


def _outcome(terminal: Any) -> str:
    if isinstance(terminal, WorkflowCompleted):
        output = json.loads(terminal.output_json)
        if isinstance(output, dict) and isinstance(output.get("decision"), str):
            return output["decision"]
        return "completed"
    if isinstance(terminal, WorkflowFailed):
        return "failed"
    if isinstance(terminal, WorkflowCancelled):
        return "cancelled"
    return type(terminal).__name__


def _shape_problems(wf: str, events: Sequence[Any]) -> list[str]:
    """Seq gaps, repeated events, and misplaced or repeated terminal events."""
    problems = []
    seqs = [e.seq for e in events]
    if seqs != list(range(1, len(events) + 1)):
        shown = seqs if len(seqs) <= 12 else [*seqs[:12], "..."]
        problems.append(f"{wf}: history seq is not contiguous from 1: {shown}")
    ids = [e.message_id for e in events]
    if len(set(ids)) != len(ids):
        problems.append(f"{wf}: the same event appears twice in the history")
    terminal = [i for i, e in enumerate(events) if isinstance(e.payload, TERMINAL_EVENTS)]
    if len(terminal) > 1:
        problems.append(f"{wf}: {len(terminal)} terminal events")
    if terminal and terminal[-1] != len(events) - 1:
        problems.append(f"{wf}: events after the terminal event")
    return problems


#: The invariants ``_shape_problems`` reports in the demo's own words.
_SHAPE_RULES = frozenset({Invariant.SEQ, Invariant.START, Invariant.RUN_END})


def _invariant_problems(events: Sequence[Any], shape_reported: bool) -> list[str]:
    """The checker's violations; its shape ones only where the demo's words found none
    (one message per broken shape), the rest always."""
    return [
        str(v) for v in check_history(events) if not (shape_reported and v.rule in _SHAPE_RULES)
    ]


def _activity_counts(wf: str, events: Sequence[Any], findings: Findings) -> None:
    """Retries (a write's attempts after the first), timeouts after an attempt could
    start, and the unknown outcomes and status-query settlements of
    ``orchestrator.domain.history.unknown_outcomes`` (the count the metrics keep)."""
    outcomes = OutcomeFold()
    for env in events:
        p = env.payload
        outcomes.add(p)
        if isinstance(p, ActivityScheduled):
            findings.retries += p.attempt > 1 and query_parent(p.activity_id) is None
        elif isinstance(p, ActivityTimedOut):
            findings.timeouts += p.timeout != TimeoutKind.SCHEDULE_TO_START
    findings.unknown_outcomes += outcomes.unknown
    settled = outcomes.settled[SettledBy.QUERY]
    findings.reconciled_by_query += settled
    if settled and wf not in findings.reconciled_runs:
        findings.reconciled_runs.append(wf)


def _posting_keys(events: Sequence[Any]) -> set[str]:
    return {
        e.payload.idempotency_key
        for e in events
        if isinstance(e.payload, ActivityScheduled) and e.payload.activity_type == "post_to_ledger"
    }


def check(
    histories: Mapping[str, Sequence[Any]],
    expected: Mapping[str, Expectation],
    ledger_book: Mapping[str, Any],
) -> Findings:
    """Check every expected run's history and the ledger; count what the table shows.

    ``histories`` maps workflow id to its envelopes in log order; ``ledger_book`` is the
    ledger's ``GET /ledger`` document.
    """
    findings = Findings()
    postings = {p["key"]: p for p in ledger_book.get("postings", [])}
    effects: dict[str, int] = dict(ledger_book.get("effects", {}))
    accounted: set[str] = set()
    for wf, want in expected.items():
        events = histories.get(wf, [])
        if not events:
            findings.not_terminal.append(wf)
            findings.violations.append(f"{wf}: no events; the run never started")
            continue
        problems = _shape_problems(wf, events)
        problems += _invariant_problems(events, bool(problems))
        findings.unsound_histories.extend(problems)
        findings.violations.extend(problems)
        _activity_counts(wf, events, findings)
        last = events[-1].payload
        if not any(isinstance(e.payload, TERMINAL_EVENTS) for e in events):
            findings.not_terminal.append(wf)
            findings.violations.append(f"{wf}: not terminal (last event {type(last).__name__})")
            continue
        outcome = _outcome(last) if isinstance(last, TERMINAL_EVENTS) else "broken"
        findings.outcomes[(want.kind.value, outcome)] += 1
        output = json.loads(last.output_json) if isinstance(last, WorkflowCompleted) else None
        if want.kind is Kind.INVOICE:
            keys = _posting_keys(events)
            accounted |= keys
            booked = [postings[k]["posting_id"] for k in keys if k in postings]
            if output is None or booked != [output.get("posting_id")]:
                findings.violations.append(
                    f"{wf}: output {output} does not match the ledger's postings {booked}"
                )
        elif output != want.output:
            findings.violations.append(f"{wf}: output {output}, expected {want.output}")
    for wf, events in histories.items():
        if wf not in expected:  # e.g. the warm-up run: its history must be sound too
            problems = _shape_problems(wf, events)
            problems += _invariant_problems(events, bool(problems))
            findings.unsound_histories.extend(problems)
            findings.violations.extend(problems)
    findings.postings = len(effects)
    findings.duplicate_effects = sum(max(0, n - 1) for n in effects.values())
    if findings.duplicate_effects:
        doubled = sorted(k for k, n in effects.items() if n > 1)
        findings.violations.append(
            f"{findings.duplicate_effects} duplicate effect(s) in the ledger: {doubled[:5]}"
        )
    orphans = sorted(set(effects) - accounted)
    if orphans:
        findings.violations.append(f"ledger postings no run accounts for: {orphans[:5]}")
    return findings
