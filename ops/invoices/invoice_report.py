"""The invoice demo's findings and table: every number from the event store and the fakes'
own books, never from Keel's logs (docs/invoice-pipeline.md, "The main job").

The invariants, each a violation when broken: every run ended in the outcome its sample
names; the ledger holds exactly one posting per invoice that posted (or was reversed)
and no key twice; only the refused supplier's posting is reversed; accounts payable
holds one payment per standing posting and no key twice; every history keeps ``keel
workflow verify``'s invariants; no reconciliation mismatch; nobody at the task desk was
refused but the stale page.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.cli.output import styled
from orchestrator.config.settings import Settings
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.history.unknown_outcomes import OutcomeFold, SettledBy, Unknown
from orchestrator.domain.model.messages import (
    ActivityFailed,
    CompensationStarted,
    HumanTaskDecided,
    HumanTaskEscalated,
    HumanTaskExpired,
    HumanTaskOpened,
    WorkflowCompensated,
    WorkflowCompleted,
    WorkflowFailed,
)
from orchestrator.domain.model.saga_messages import WorkflowCompensationFailed
from orchestrator.records.llm_usage import usages_of

__all__ = ["Books", "Findings", "duplicate_effects", "find", "outcome_of", "report"]

APPROVAL_TASK = "approve_posting"


@dataclass(frozen=True)
class Books:
    """The external systems' own records: the ledger's and accounts payable's."""

    ledger: dict[str, Any]
    payables: dict[str, Any]


@dataclass
class Findings:
    outcomes: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    unknown: int = 0
    settled_by_query: int = 0
    compensations: int = 0
    approvals: Counter[str] = field(default_factory=Counter)
    waits_s: list[float] = field(default_factory=list)
    model_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    mismatches: int = 0
    violations: list[str] = field(default_factory=list)
    example: dict[str, str] = field(default_factory=dict)


def outcome_of(events: list[Any]) -> str:
    """A run's outcome: its output's ``outcome`` when it completed, else how it ended (a
    terminal status), else the type of its last event (it has not ended)."""
    end = events[-1].payload if events else None
    if isinstance(end, WorkflowCompleted):
        return str(json.loads(end.output_json).get("outcome", "completed"))
    if isinstance(end, WorkflowCompensated):
        return "compensated"
    if isinstance(end, WorkflowCompensationFailed):
        return "compensation_failed"
    if isinstance(end, WorkflowFailed):
        return "failed"
    return "not ended" if end is None else type(end).__name__


def find(histories: dict[str, list[Any]], expected: dict[str, str], books: Books) -> Findings:
    """What the histories and the books show, and every invariant they break."""
    f = Findings()
    for wf, want in expected.items():
        events = [e for e in histories.get(wf, []) if e.payload.KIND == "event"]
        got = outcome_of(events)
        f.outcomes[got] += 1
        if got != want:
            f.violations.append(f"{wf[:16]}…: ended {got}, expected {want}")
        f.violations += [f"{wf[:16]}…: {v}" for v in check_history(events)]
        f.mismatches += got == "mismatch"
        _fold(f, wf, events)
    _check_books(f, expected, histories, books)
    return f


def _fold(f: Findings, wf: str, events: list[Any]) -> None:
    opened: dict[str, int] = {}
    outcomes = OutcomeFold()
    for e in events:
        p = e.payload
        if isinstance(outcomes.add(p), Unknown):
            f.example.setdefault("unknown", wf)
        if isinstance(p, ActivityFailed):
            f.retries[p.failure_class] += 1
        elif isinstance(p, CompensationStarted):
            f.compensations += 1
            f.example.setdefault("compensated", wf)
        elif isinstance(p, HumanTaskOpened) and p.task_name == APPROVAL_TASK:
            opened[p.task_id] = e.recorded_at
        elif isinstance(p, HumanTaskDecided) and p.task_id in opened:
            f.approvals["approved" if p.decision == "approve" else "rejected"] += 1
            f.waits_s.append((e.recorded_at - opened[p.task_id]) / 1000)
            f.example.setdefault("approved", wf)
        elif isinstance(p, HumanTaskEscalated) and p.task_id in opened:
            f.approvals["escalated"] += 1
        elif isinstance(p, HumanTaskExpired) and p.task_id in opened:
            f.approvals["expired"] += 1
    f.unknown += outcomes.unknown
    f.settled_by_query += outcomes.settled[SettledBy.QUERY]  # found (taken) or not (sent again)
    for u in usages_of(events, {}):
        f.model_calls += u.calls
        f.tokens += u.total_tokens
        f.cost_usd += u.cost_usd


def _check_books(
    f: Findings, expected: dict[str, str], histories: dict[str, list[Any]], books: Books
) -> None:
    postings = books.ledger["postings"]
    should_post = {wf for wf, want in expected.items() if want in ("posted", "compensated")}
    per_run = Counter(p["extra"].get("invoice_id") for p in postings)
    if set(per_run) != should_post or set(per_run.values()) - {1}:
        f.violations.append(
            f"the ledger holds postings for {len(per_run)} runs ({sum(per_run.values())} "
            f"postings), expected one for each of {len(should_post)}"
        )
    if set(books.ledger["effects"].values()) - {1}:
        f.violations.append("the ledger holds a key with more than one posting")
    reversed_ = {p["extra"].get("invoice_id") for p in postings if p.get("reversed")}
    compensated = {wf for wf, want in expected.items() if want == "compensated"}
    if reversed_ != compensated:
        f.violations.append(f"{len(reversed_)} postings reversed, expected {len(compensated)}")
    standing = {p["posting_id"] for p in postings if not p.get("reversed")}
    paid = {p["posting_id"] for p in books.payables["payments"].values()}
    if paid != standing:
        f.violations.append(f"{len(paid)} payments for {len(standing)} standing postings")
    if set(books.payables["effects"].values()) - {1}:
        f.violations.append("accounts payable holds a key with more than one effect")
    if f.mismatches:
        f.violations.append(f"{f.mismatches} reconciliation mismatches")


def report(
    console: Console,
    settings: Settings,
    expected_manifest: list[dict[str, Any]],
    run: dict[str, Any],
    books: Books,
    took_s: float,
) -> int:
    """Read the histories, print the tables; the exit code (0: every invariant held)."""
    from orchestrator.client.history_io import read_topic_history

    ids = run["workflow_ids"]  # in the manifest's order
    expected = {wf: m["expected"] for wf, m in zip(ids, expected_manifest, strict=True)}
    histories: dict[str, list[Any]] = {}
    for env in read_topic_history(settings, ids, commands=False):
        histories.setdefault(env.workflow_id, []).append(env)
    f = find(histories, expected, books)
    f.violations += run["desk_problems"]
    _tables(console, f, run, books, took_s)
    _explore(console, f, run)
    return 0 if not f.violations else 1


def _tables(console: Console, f: Findings, run: dict[str, Any], books: Books, took: float) -> None:
    outcomes = Table(title="Outcomes", title_justify="left")
    outcomes.add_column("outcome")
    outcomes.add_column("invoices", justify="right")
    for name, n in sorted(f.outcomes.items()):
        outcomes.add_row(name, str(n))
    console.print(outcomes)
    ledger = books.ledger
    uploads = run["uploads"]
    joined = sum(1 for s in uploads if s == 202) - len(run["workflow_ids"])
    deduped_calls = sum(ledger["calls"].values()) - sum(ledger["effects"].values())
    waits = f.waits_s or [0.0]
    rows = [
        ("invoices (runs)", len(run["workflow_ids"])),
        ("uploads through the connector", len(uploads)),
        ("repeated deliveries answered 200, nothing written", uploads.count(200)),
        ("re-uploads joined to their run", joined),
        ("ledger calls deduplicated by key", deduped_calls),
        ("ledger postings", len(ledger["postings"])),
        ("duplicate effects (ledger and payables)", duplicate_effects(books)),
        ("retries by class", _classes(f.retries)),
        ("unknown outcomes (lost answers, timeouts)", f.unknown),
        ("settled by status query", f.settled_by_query),
        ("compensations (posting reversed)", f.compensations),
        ("approvals approved / rejected", f"{f.approvals['approved']} / {f.approvals['rejected']}"),
        ("approvals refused as stale", run["stale_refused"]),
        ("approvals escalated / expired", f"{f.approvals['escalated']} / {f.approvals['expired']}"),
        ("approval wait mean / max (s)", f"{statistics.fmean(waits):.1f} / {max(waits):.1f}"),
        ("model calls / tokens", f"{f.model_calls} / {f.tokens}"),
        ("model cost (USD)", f"{f.cost_usd:.6f}"),
        ("reconciliation mismatches", f.mismatches),
        ("SIGKILLs (orchestrator, worker)", len(run["killed"])),
        ("invariant violations", len(f.violations)),
        ("seconds", f"{took:.1f}"),
    ]
    table = Table(title="Checked in keel.events and the fakes' own books", title_justify="left")
    table.add_column("check")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    for problem in f.violations[:20]:
        console.print(styled(("violation:", "red"), f" {problem}"), highlight=False)
    if not f.violations:
        console.print(
            styled(
                ("every invariant held", "green"),
                ": each invoice ended as its sample says, the ledger holds one posting per "
                "posted invoice (the refused payment's reversed), accounts payable one payment "
                "per standing posting, and every history is sound",
            ),
            soft_wrap=True,
        )


def duplicate_effects(books: Books) -> int:
    """Effects past the first under one key, in the ledger's and accounts payable's books."""
    return sum(n - 1 for n in books.ledger["effects"].values() if n > 1) + sum(
        n - 1 for n in books.payables["effects"].values() if n > 1
    )


def _classes(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def _explore(console: Console, f: Findings, run: dict[str, Any]) -> None:
    console.print("\nExplore (Kafka and Redis stay up; `make down` stops them):")
    env = f"{run['log_dir']}/explore.env"
    lines = [f"set -a; . {env}; set +a    # its prefix, app, actors, secret"]
    for what, wf in sorted(f.example.items()):
        lines.append(f"keel workflow show {wf}    # {what}")
    lines += [
        "keel workflow list --name invoice_pipeline",
        "keel connector",
        f"# then the web UI: http://127.0.0.1:8700/ui, signed in as the demo approver fiona "
        f"with the token {run['approver_token']} (the others: {run['log_dir']}/people.json)",
    ]
    for line in lines:
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
