"""``keel demo``: a batch of the bundled workflows through real processes, a crash included.

It starts the fake ledger, one orchestrator and one worker as separate processes on a
fresh topic prefix, starts ``size`` runs of ``parallel_checks``, ``document_review`` (the
demo answers each request for documents with a signal) and ``invoice_posting`` (the
ledger drops some responses after committing, and refuses a few requests), SIGKILLs the
orchestrator once half of the runs have ended and starts it again, then checks every
history in ``keel.events`` and the ledger's own books (see ``ops/demo_checks.py``) and
prints the results. Every process it started is stopped by PID.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ops.demo_checks import Expectation, Findings, Kind, check
from ops.fakes.ledger import LedgerClient
from orchestrator.cli.output import styled
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.domain.model.messages import TERMINAL_EVENTS, SignalWorkflow, StateEntered
from orchestrator.io.kafka.clients import security_config
from orchestrator.payload_schemas.codec import codec_for

START_RATE_PER_S = 80.0
WAITING_STATE = "needs_documents"
SIGNAL = "documents_added"
WARM_UP = "warm-up"

# (first document, documents sent one per request for more, expected output)
REVIEWS: list[tuple[str, list[str], dict[str, Any]]] = [
    ("signed contract", ["receipt", "bank statement"], {"decision": "approved", "documents": 3}),
    ("expense claim", ["receipt", "fraud alert"], {"decision": "rejected", "documents": 3}),
    ("invoice flagged for fraud", [], {"decision": "rejected", "documents": 1}),
]


@dataclass(frozen=True)
class Run:
    """One workflow run of the batch."""

    workflow_id: str
    kind: Kind
    input: dict[str, Any]
    expect: Expectation
    documents: tuple[str, ...] = ()


def plan(size: int) -> list[Run]:
    """``size`` runs, the three kinds in turn, with inputs whose outcomes are known."""
    runs = []
    for i in range(size):
        kind = (Kind.CHECKS, Kind.REVIEW, Kind.INVOICE)[i % 3]
        j = i // 3
        if kind is Kind.CHECKS:
            out = {"result": (j + 1) + 2 * j + j * j}
            runs.append(Run(f"checks-{j:04d}", kind, {"n": j}, Expectation(kind, out)))
        elif kind is Kind.REVIEW:
            first, more, out = REVIEWS[j % len(REVIEWS)]
            exp = Expectation(kind, out)
            runs.append(Run(f"review-{j:04d}", kind, {"document": first}, exp, tuple(more)))
        else:
            inv = {"invoice_id": f"INV-{j:05d}", "account": f"ACME-{j % 7}", "amount": 10 + j}
            runs.append(Run(f"invoice-{j:04d}", kind, inv, Expectation(kind)))
    return runs


class EventTail:
    """Reads ``keel.events`` (committed records only) from the start, per workflow."""

    def __init__(self, settings: Settings) -> None:
        self.codec = codec_for(settings)
        self.partitions = settings.partitions
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.kafka_servers,
                "group.id": f"{settings.topic_prefix}.demo-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
                **security_config(settings),
            }
        )
        topic = settings.topic("events")
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(self.partitions)])
        self.histories: dict[str, list[Any]] = {}
        self.at_eof: set[int] = set()

    def poll(self, timeout_s: float = 0.05) -> list[Any]:
        """New events since the last call, decoded."""
        new = []
        for msg in self.consumer.consume(1000, timeout_s):
            err, partition, value = msg.error(), msg.partition(), msg.value()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and partition is not None:
                    self.at_eof.add(partition)
                    continue
                raise UnavailableError(f"reading keel.events failed: {err}")
            self.at_eof.discard(partition or 0)
            if value is None:
                continue
            env = self.codec.decode(value)
            self.histories.setdefault(env.workflow_id, []).append(env)
            new.append(env)
        return new

    def drain(self, max_s: float = 30.0) -> None:
        """Read up to the end of every partition (the last stable offset)."""
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            if not self.poll(0.2) and len(self.at_eof) == self.partitions:
                return

    def close(self) -> None:
        self.consumer.close()


@dataclass
class Processes:
    """The demo's child processes; each is stopped by its PID."""

    settings: Settings
    log_dir: Path
    ledger_url: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ledger: subprocess.Popen[str] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        defaults = {"KEEL_LEDGER_URL": self.ledger_url, "KEEL_LOG_LEVEL": "INFO"}
        return self.settings.child_environment(**(defaults | extra))

    def start_ledger(self) -> str:
        self.ledger = subprocess.Popen(
            [sys.executable, "-m", "ops.fakes.ledger", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=(self.log_dir / "ledger.log").open("wb"),
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.ledger.stdout is not None
        ready, _, _ = select.select([self.ledger.stdout], [], [], 30)
        line = self.ledger.stdout.readline().strip() if ready else ""
        if not line.startswith("ledger listening on "):
            raise UnavailableError(
                f"the fake ledger did not start within 30 s (see {self.log_dir}/ledger.log)"
            )
        self.ledger_url = line.removeprefix("ledger listening on ")
        return self.ledger_url

    def start(self, role: str, **env: str) -> subprocess.Popen[bytes]:
        n = sum(1 for name in self.procs if name.startswith(role))
        log = (self.log_dir / f"{role}-{n}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", role],
            env=self.env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.procs[f"{role}-{n}"] = proc
        return proc

    def stop_all(self) -> None:
        children: list[subprocess.Popen[Any]] = [*self.procs.values()]
        if self.ledger is not None:
            children.append(self.ledger)
        for proc in children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in children:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@dataclass
class Batch:
    """The state of one demo run, as the event stream reports it."""

    runs: list[Run]
    started: int = 0
    ended: set[str] = field(default_factory=set)
    signals_sent: int = 0
    answered: set[tuple[str, int]] = field(default_factory=set)
    killed_at: int | None = None  # runs ended when the orchestrator was killed
    in_flight_at_kill: int = 0
    drops_planned: int = 0  # responses the ledger was told to drop
    dropped: int = 0  # responses it did drop, by its own fault counter


@contextmanager
def _progress(console: Console) -> Iterator[Progress]:
    with Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        yield progress


def _faults(invoices: int) -> dict[str, Any]:
    """One wave of ledger faults: dropped responses, and one 500 and one 429.

    Two waves hold three refusals in all, fewer than ``invoice_posting``'s four attempts,
    so no posting can run out of attempts; the dropped responses are settled by the
    status query. Dedupe is off, so a second POST of a key would show as a duplicate.
    """
    return {"drop_after_commit": max(1, invoices // 6), "status_500": 1, "dedupe": False}


def fresh_prefix(settings: Settings, stem: str) -> tuple[Settings, Path]:
    """A demo's own topic prefix (its topics created) and log folder."""
    from orchestrator.io.kafka.topics import create_topics

    prefix = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    settings = settings.model_copy(update={"topic_prefix": prefix})
    log_dir = Path(settings.home) / "demo" / prefix
    log_dir.mkdir(parents=True, exist_ok=True)
    create_topics(settings)
    return settings, log_dir


def run_demo(settings: Settings, size: int, console: Console) -> int:
    """Run the batch and print the report; the exit code is 0 only if every invariant held."""
    from orchestrator.client.client import KeelClient
    from orchestrator.examples import app

    began = time.monotonic()
    settings, log_dir = fresh_prefix(settings, "demo")
    prefix = settings.topic_prefix
    batch = Batch(plan(size))
    procs = Processes(settings, log_dir)
    console.print(
        styled(("keel demo", "bold"), f": {size} runs on topic prefix ", (prefix, "cyan"))
    )
    tail = EventTail(settings)
    client = KeelClient(settings, app)
    try:
        ledger = LedgerClient(procs.start_ledger())
        orch = procs.start("orchestrator", KEEL_INSTANCE_ID=f"{prefix}-orchestrator")
        procs.start("worker")
        console.print(
            f"started the fake ledger ({procs.ledger_url}), an orchestrator (pid {orch.pid}) "
            f"and a worker; logs in {log_dir}",
            soft_wrap=True,
        )
        _warm_up(client, tail, log_dir)
        _run_batch(client, tail, batch, procs, ledger, console)
        tail.drain()
        book = ledger.ledger()
        findings = check(tail.histories, {r.workflow_id: r.expect for r in batch.runs}, book)
        shown = _wait_for_read_model(client, size + 1, 30)  # the batch and the warm-up run
        if shown < size + 1:
            findings.violations.append(
                f"the read model shows {shown} of {size + 1} runs ended after 30 s"
            )
    finally:
        procs.stop_all()
        client.close()
        tail.close()
    _report(console, batch, findings, prefix, time.monotonic() - began)
    return findings.exit_code


def _warm_up(client: Any, tail: EventTail, log_dir: Path, max_s: float = 120) -> None:
    """One run end to end before the batch, so the batch measures Keel, not process start."""
    client.start_many(Kind.CHECKS.value, [(WARM_UP, {"n": 0})])
    deadline = time.monotonic() + max_s
    while not any(isinstance(e.payload, TERMINAL_EVENTS) for e in tail.histories.get(WARM_UP, [])):
        if time.monotonic() > deadline:
            raise UnavailableError(
                f"the orchestrator and worker did not finish a warm-up run within {max_s:g} s; "
                f"see their logs in {log_dir}"
            )
        tail.poll(0.1)


def _run_batch(
    client: Any,
    tail: EventTail,
    batch: Batch,
    procs: Processes,
    ledger: LedgerClient,
    console: Console,
) -> None:
    """Start the runs, answer signals, crash and restart the orchestrator halfway."""
    size = len(batch.runs)
    by_id = {r.workflow_id: r for r in batch.runs}
    invoices = sum(1 for r in batch.runs if r.kind is Kind.INVOICE)
    ledger.set_faults(**_faults(invoices), status_429=1)
    batch.drops_planned = _faults(invoices)["drop_after_commit"]
    began = time.monotonic()
    deadline = began + 90 + size * 0.3
    with _progress(console) as progress:
        started_task = progress.add_task("runs started", total=size)
        ended_task = progress.add_task("runs ended", total=size)
        while len(batch.ended) < size and time.monotonic() < deadline:
            _start_due(client, batch, time.monotonic() - began)
            progress.update(started_task, completed=batch.started)
            for env in tail.poll():
                _on_event(client, batch, by_id, env)
            progress.update(ended_task, completed=len(batch.ended))
            if batch.killed_at is None and len(batch.ended) >= max(1, size // 2):
                batch.drops_planned -= ledger.faults()["drop_after_commit"]
                _crash_and_restart(batch, procs, progress.console)
                ledger.set_faults(**_faults(invoices))
                batch.drops_planned += _faults(invoices)["drop_after_commit"]
    batch.dropped = batch.drops_planned - ledger.faults()["drop_after_commit"]


def _crash_and_restart(batch: Batch, procs: Processes, console: Console) -> None:
    """SIGKILL the running orchestrator and start it again with the same instance id."""
    batch.killed_at = len(batch.ended)
    batch.in_flight_at_kill = batch.started - batch.killed_at
    orch = next(p for n, p in reversed(procs.procs.items()) if n.startswith("orchestrator"))
    os.kill(orch.pid, signal.SIGKILL)
    orch.wait(timeout=30)
    console.print(
        styled(
            ("SIGKILL", "red"),
            f" orchestrator pid {orch.pid} with {batch.in_flight_at_kill} runs in flight",
        )
    )
    instance = procs.settings.topic_prefix + "-orchestrator"
    orch = procs.start("orchestrator", KEEL_INSTANCE_ID=instance)
    console.print(f"restarted the orchestrator: pid {orch.pid}")


def _start_due(client: Any, batch: Batch, elapsed_s: float) -> None:
    """Start the runs due by now at ``START_RATE_PER_S``, grouped by workflow."""
    due = min(len(batch.runs), int(elapsed_s * START_RATE_PER_S) + 1)
    if due <= batch.started:
        return
    todo = batch.runs[batch.started : due]
    for kind in Kind:
        group = [(r.workflow_id, r.input) for r in todo if r.kind is kind]
        if group:
            client.start_many(kind.value, group)
    batch.started = due


def _on_event(client: Any, batch: Batch, by_id: dict[str, Run], env: Any) -> None:
    """Count ended runs; answer each request for documents with one signal."""
    run = by_id.get(env.workflow_id)
    if run is None:
        return
    p = env.payload
    if isinstance(p, TERMINAL_EVENTS):
        batch.ended.add(run.workflow_id)
    elif isinstance(p, StateEntered) and p.state == WAITING_STATE:
        if (run.workflow_id, p.visit) in batch.answered or p.visit > len(run.documents):
            return
        batch.answered.add((run.workflow_id, p.visit))
        payload = json.dumps({"document": run.documents[p.visit - 1]})
        client.send(run.workflow_id, SignalWorkflow(SIGNAL, payload))
        batch.signals_sent += 1


def _wait_for_read_model(client: Any, size: int, max_s: float) -> int:
    """Runs the Redis read model shows as ended, once it shows all (or ``max_s`` passed)."""
    deadline = time.monotonic() + max_s
    while True:
        counts = client.projection.counts()
        ended = sum(counts.get(s, 0) for s in ("completed", "failed", "cancelled"))
        if ended >= size or time.monotonic() > deadline:
            return int(ended)
        time.sleep(0.2)


def _report(console: Console, batch: Batch, f: Findings, prefix: str, took_s: float) -> None:
    outcomes = Table(title="Outcomes", title_justify="left")
    outcomes.add_column("workflow")
    outcomes.add_column("outcome")
    outcomes.add_column("runs", justify="right")
    for (kind, outcome), n in sorted(f.outcomes.items()):
        outcomes.add_row(kind, outcome, str(n))
    console.print(outcomes)

    table = Table(title="Checked in keel.events and the ledger", title_justify="left")
    table.add_column("check")
    table.add_column("value", justify="right")
    in_flight = "-" if batch.killed_at is None else str(batch.in_flight_at_kill)
    rows = [
        ("runs", len(batch.runs)),
        ("runs ended", len(batch.runs) - len(f.not_terminal)),
        ("orchestrator SIGKILLs", 0 if batch.killed_at is None else 1),
        ("runs in flight at the kill", in_flight),
        ("signals sent", batch.signals_sent),
        ("activity retries", f.retries),
        ("responses the ledger dropped", batch.dropped),
        ("activity timeouts", f.timeouts),
        ("unknown outcomes", f.unknown_outcomes),
        ("reconciled by status query", f.reconciled_by_query),
        ("ledger postings", f.postings),
        ("duplicate effects", f.duplicate_effects),
        ("runs not terminal", len(f.not_terminal)),
        ("unsound histories", len(f.unsound_histories)),
        ("invariant violations", len(f.violations)),
        ("seconds", f"{took_s:.1f}"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)

    for problem in f.violations[:20]:
        console.print(styled(("violation:", "red"), f" {problem}"), highlight=False)
    if f.ok:
        console.print(
            styled(
                ("every invariant held", "green"),
                ": each run ended exactly once with a contiguous history that keeps keel "
                "workflow verify's invariants, and the ledger holds one posting per idempotency "
                "key",
            ),
            soft_wrap=True,
        )
    example = f.reconciled_runs[0] if f.reconciled_runs else "invoice-0000"
    review = next((r.workflow_id for r in batch.runs if len(r.documents) == 2), "review-0000")
    console.print("\nExplore one run (the read model stays in Redis under this prefix):")
    for line in (
        f"export KEEL_TOPIC_PREFIX={prefix}",
        "keel workflow verify --all    # every history against the invariants again",
        f"keel workflow show {example}    # response dropped, settled by the status query",
        f"keel workflow show {review}     # a review that waited twice for documents",
        "keel workflow list --status completed",
    ):
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
