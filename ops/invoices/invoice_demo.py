"""``keel demo``: the invoice pipeline end to end, through a crash, checked from outside.

It starts the fakes (ledger, accounts payable, the scripted model), an orchestrator, a
worker and the connector on a fresh topic prefix, sends every sample invoice through the
connector's signed webhook source (the first file three times), and acts like people
through the connector's task API: approvers approve most large invoices, reject one,
approve one from a stale page first (refused) and never answer one (escalated, then
expired); clerks correct what the model could not read. The ledger drops answers after
committing, accounts payable refuses one supplier's payments for good and fails a few
notifications; the orchestrator and the worker are SIGKILLed and restarted halfway. Then
``invoice_report`` reads every number from the event store and the fakes' own books.
Every process it started is stopped by PID; Kafka and Redis stay up.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from connectors.signing import signature_header
from ops.demo_job import fresh_prefix
from ops.fakes import serving
from ops.fakes.ledger import LedgerClient
from ops.fakes.openai_server import running as model_running
from ops.fakes.payables import PayablesClient
from ops.invoices.invoice_report import Books, report
from ops.invoices.invoice_samples import (
    Sample,
    Scenario,
    corrected,
    manifest,
    model_script,
    samples,
)
from orchestrator.cli.output import styled
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.domain.model.state import TERMINAL_STATUSES

__all__ = [
    "APP",
    "Desk",
    "FakeUrls",
    "Stack",
    "fakes_running",
    "pipeline_stack",
    "run_invoice_demo",
    "upload",
    "write_people",
]

APP = "orchestrator.examples.invoice_pipeline:app"
#: People, by role: each has a bearer token for the connector's task API.
PEOPLE = {
    "fiona": ["finance-approver"],
    "lena": ["finance-lead"],
    "carla": ["invoice-clerk"],
    "otto": ["keel-operator"],
}
#: The SLA of the approval nobody answers: escalated after 3 s, expired after 8 s.
SHORT_SLA = {"due_s": 2, "escalate_after_s": 3, "expires_after_s": 8}
REFUSED_SUPPLIER = "Fjord Legal Partners"
#: How often a stale approval still pending (the orchestrator SIGKILLed meanwhile) is
#: sent again to learn its refusal: the task API keeps each answer for a repeat.
STALE_ASKS = 4
STARTED_BY = "keel demo"


@dataclass
class Stack:
    """The demo's child processes (each stopped by PID) and the connector's address."""

    settings: Settings
    log_dir: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    connector_url: str = ""

    def start(self, role: str, *args: str) -> subprocess.Popen[bytes]:
        n = sum(1 for name in self.procs if name.startswith(role))
        log = (self.log_dir / f"{role}-{n}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", role, *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.procs[f"{role}-{n}"] = proc
        return proc

    def start_connector(self, max_s: float = 60) -> str:
        n = sum(1 for name in self.procs if name.startswith("connector"))
        proc = self.start("connector", "--port", "0")
        log = self.log_dir / f"connector-{n}.log"
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline and proc.poll() is None:
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("connector listening on "):
                    self.connector_url = line.split()[3]
                    return self.connector_url
            time.sleep(0.1)
        raise UnavailableError(f"the connector did not start; see {log}")

    def kill(self, role: str) -> int:
        """SIGKILL the newest process of ``role`` and start it again; its old pid."""
        proc = next(p for n, p in reversed(self.procs.items()) if n.startswith(role))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self.start(role)
        return proc.pid

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@dataclass
class Desk:
    """People at the connector's task API, and what happened to their decisions."""

    url: str
    tokens: dict[str, str]
    by_wf: dict[str, Sample]
    decided: set[str] = field(default_factory=set)
    stale_refused: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    #: Every decision sent: (who, the task's path, the body), to be sent again.
    sent: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def _call(self, who: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.tokens[who]}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def decide(self, who: str, task: dict[str, Any], verdict: str, **extra: Any) -> Any:
        body = {"decision": verdict, "reason": f"{verdict} by {who}"}
        body["operation_digest"] = extra.pop("digest", task["operation_digest"])
        path = f"/tasks/{task['token']}/decision"
        self.sent.append((who, path, body | extra))
        return self._call(who, "POST", path, body | extra)

    def repeat(self, who: str, path: str, body: dict[str, Any]) -> Any:
        """Send a decision again, as a person's double click or a proxy's retry would."""
        return self._call(who, "POST", path, body)

    def act(self) -> None:
        """Look at each person's inbox once and decide what a person would."""
        for who in ("fiona", "carla"):
            status, inbox = self._call(who, "GET", "/tasks")
            if status != 200:
                continue
            for task in inbox["tasks"]:
                sample = self.by_wf.get(task["workflow_id"])
                if sample is None or task["task_id"] in self.decided or not task.get("token"):
                    continue
                self._one(who, task, sample)

    def _one(self, who: str, task: dict[str, Any], sample: Sample) -> None:
        scenario = sample.scenario
        if scenario is Scenario.EXPIRE:
            return  # nobody answers: escalated, then expired
        if scenario is Scenario.STALE and task["task_id"] not in self.stale_refused:
            _, answer = self.decide(who, task, "approve", digest=hashlib.sha256(b"old").hexdigest())
            for _ in range(STALE_ASKS):  # no answer yet (a crash): the same request learns it
                if answer.get("status") != "pending":
                    break
                _, answer = self.repeat(*self.sent[-1])
            self.stale_refused.append(task["task_id"])
            if answer.get("status") != "refused":
                self.refusals.append(f"a stale approval was not refused: {answer}")
        if who == "carla":
            if scenario is Scenario.UNKNOWN_SUPPLIER:
                status, answer = self.decide(who, task, "reject")
            else:
                status, answer = self.decide(who, task, "approve", correction=corrected(sample))
        else:
            verdict = "reject" if scenario is Scenario.REJECT else "approve"
            status, answer = self.decide(who, task, verdict)
        if answer.get("status") in ("decided", "repeated"):
            self.decided.add(task["task_id"])
        elif answer.get("status") != "pending":
            self.refusals.append(f"{task['task_id']}: {status} {answer}")


def upload(url: str, secret: str, event_id: str, sample: Sample) -> int:
    body = json.dumps(
        {"id": event_id, "file_name": sample.file_name, "document": sample.document()}
        | ({"sla": SHORT_SLA} if sample.scenario is Scenario.EXPIRE else {})
    ).encode()
    req = urllib.request.Request(f"{url}/webhooks/invoices", data=body, method="POST")
    req.add_header("Keel-Signature", signature_header([secret], int(time.time()), body))
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


#: The demo's faults: the ledger drops two answers after committing, accounts payable
#: refuses one supplier's payments for good and fails three notifications.
DEMO_LEDGER_FAULTS: dict[str, Any] = {"drop_after_commit": 2}
DEMO_PAYABLES_FAULTS: dict[str, Any] = {"refuse_payments_to": [REFUSED_SUPPLIER], "notify_500": 3}


@dataclass(frozen=True)
class FakeUrls:
    ledger: str
    payables: str
    model: str


@contextmanager
def fakes_running(
    items: list[Sample],
    ledger_faults: dict[str, Any],
    payables_faults: dict[str, Any],
    script: list[dict[str, Any]] | None = None,
    model_faults: dict[str, Any] | None = None,
) -> Iterator[FakeUrls]:
    """The ledger, accounts payable and the model scripted for ``items`` (or with
    ``script``), with faults set (the model's too, when given)."""
    with ExitStack() as stack:
        ledger = stack.enter_context(serving.running("ops.fakes.ledger", "ledger"))
        payables = stack.enter_context(serving.running("ops.fakes.payables", "payables"))
        model = stack.enter_context(model_running())
        model.script(model_script(items)["responses"] if script is None else script)
        LedgerClient(ledger).set_faults(**ledger_faults)
        PayablesClient(payables).set_faults(**payables_faults)
        if model_faults:
            model.set_faults(**model_faults)
        yield FakeUrls(ledger, payables, model.api_root)


def pipeline_stack(
    settings: Settings, log_dir: Path, urls: FakeUrls, hook_secret: str, app: str = APP
) -> Stack:
    """The processes of the invoice pipeline (or another ``app`` on the same fakes) on
    ``settings``' prefix, none started yet; the people's actors file is
    ``log_dir/actors.json``."""
    return Stack(
        settings,
        log_dir,
        settings.child_environment(
            KEEL_APP=app,
            KEEL_LOG_LEVEL="INFO",
            KEEL_LEDGER_URL=urls.ledger,
            KEEL_PAYABLES_URL=urls.payables,
            KEEL_LLM_BASE_URL=urls.model,
            KEEL_TASK_TOKEN_SECRET=secrets.token_hex(32),
            KEEL_ACTORS_FILE=str(log_dir / "actors.json"),
            KEEL_WEBHOOK_INVOICES_SECRETS=hook_secret,
        ),
    )


def write_people(log_dir: Path) -> dict[str, str]:
    """Throwaway bearer tokens for ``PEOPLE``; their hashes in ``log_dir/actors.json``."""
    tokens = {who: secrets.token_hex(24) for who in PEOPLE}
    actors = {
        who: {"token_sha256": hashlib.sha256(tokens[who].encode()).hexdigest(), "roles": roles}
        for who, roles in PEOPLE.items()
    }
    (log_dir / "actors.json").write_text(json.dumps(actors))
    return tokens


def run_invoice_demo(settings: Settings, size: int, console: Console) -> int:
    """Run the batch and print the report; 0 only if every invariant held."""
    began = time.monotonic()
    settings, log_dir = fresh_prefix(settings, "invoices")
    prefix = settings.topic_prefix
    items = samples(extra=max(0, size - len(samples())))
    tokens = write_people(log_dir)
    people = log_dir / "people.json"  # the throwaway tokens, for the web UI's sign-in
    people.touch(mode=0o600)
    people.write_text(json.dumps(tokens))
    hook_secret = secrets.token_hex(24)
    explore = log_dir / "explore.env"  # what a shell needs to look at this demo's runs
    explore.touch(mode=0o600)
    explore.write_text(  # the app too: no command the hints print needs ``--app``
        f"KEEL_TOPIC_PREFIX={prefix}\nKEEL_APP={APP}\nKEEL_ACTORS_FILE={log_dir / 'actors.json'}\n"
        f"KEEL_WEBHOOK_INVOICES_SECRETS={hook_secret}\n"
    )
    console.print(
        styled(
            ("keel demo", "bold"),
            f": {len(items)} invoices through the invoice pipeline on topic prefix ",
            (prefix, "cyan"),
        )
    )
    with fakes_running(items, DEMO_LEDGER_FAULTS, DEMO_PAYABLES_FAULTS) as urls:
        stack = pipeline_stack(settings, log_dir, urls, hook_secret)
        try:
            stack.start("orchestrator")
            stack.start("worker")
            url = stack.start_connector()
            console.print(
                f"started the ledger, accounts payable, the scripted model, an orchestrator, a "
                f"worker and the connector ({url}); logs in {log_dir}",
                soft_wrap=True,
            )
            run = _batch(stack, items, hook_secret, tokens, console)
            books = Books(LedgerClient(urls.ledger).ledger(), PayablesClient(urls.payables).books())
        finally:
            stack.stop_all()
    return report(console, settings, manifest(items), run, books, time.monotonic() - began)


def _batch(
    stack: Stack, items: list[Sample], secret: str, tokens: dict[str, str], console: Console
) -> dict[str, Any]:
    """Upload every file, act like people, crash halfway; what the demo itself saw."""
    from orchestrator.client.client import KeelClient
    from orchestrator.examples.invoice_pipeline import app
    from orchestrator.examples.invoice_pipeline.pipeline_models import file_digest

    client = KeelClient(stack.settings, app)
    by_wf = {file_digest(s.document()): s for s in items}
    later = [wf for wf, s in by_wf.items() if s.scenario is Scenario.DUPLICATE]
    desk = Desk(stack.connector_url, tokens, by_wf)
    uploads: list[int] = []
    killed: dict[str, int] = {}
    sent_late: set[str] = set()
    deadline = time.monotonic() + 150 + len(items)
    try:
        for i, s in enumerate(items):
            if s.scenario is not Scenario.DUPLICATE:
                uploads.append(upload(stack.connector_url, secret, f"upload-{i}", s))
        first = items[0]  # the same file twice more: a retried delivery and a re-upload
        uploads.append(upload(stack.connector_url, secret, "upload-0", first))
        uploads.append(upload(stack.connector_url, secret, "upload-0-again", first))
        with Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            bar = progress.add_task("invoices ended", total=len(by_wf))
            ended: set[str] = set()
            while len(ended) < len(by_wf) and time.monotonic() < deadline:
                desk.act()
                rows = client.projection.statuses(list(by_wf))
                ended = {wf for wf, st in zip(by_wf, rows, strict=True) if st in TERMINAL_STATUSES}
                progress.update(bar, completed=len(ended))
                if not killed and len(ended) >= len(by_wf) // 2:
                    for role in ("orchestrator", "worker"):
                        killed[role] = stack.kill(role)
                    progress.console.print(
                        styled(
                            ("SIGKILL", "red"),
                            f" orchestrator pid {killed['orchestrator']} and "
                            f"worker pid {killed['worker']} with {len(by_wf) - len(ended)} "
                            "invoices in flight; both restarted",
                        )
                    )
                for wf in later:
                    original = next(
                        w for w, s in by_wf.items() if s.number == by_wf[wf].number and w != wf
                    )
                    if original in ended and wf not in sent_late:
                        sent_late.add(wf)  # uploaded once, after its original ended
                        uploads.append(upload(stack.connector_url, secret, "upload-dup", by_wf[wf]))
                time.sleep(0.2)
    finally:
        client.close()
    return {
        "workflow_ids": list(by_wf),
        "uploads": uploads,
        "stale_refused": len(desk.stale_refused),
        "desk_problems": desk.refusals,
        "killed": killed,
        "log_dir": str(stack.log_dir),
        "approver_token": tokens["fiona"],  # a throwaway local token, for the UI's sign-in
    }
