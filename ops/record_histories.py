"""Record the replay corpus (``tests/histories``) by running the real stack.

An orchestrator, a worker and the fake ledger run as processes against the Kafka and
Redis named by ``KEEL_BOOTSTRAP_SERVERS`` / ``KEEL_REDIS_URL``, under a fresh topic
prefix; every example workflow is driven through its paths (happy, retries, timeouts,
signals, failures, cancel, dead letter and redrive, unknown outcome settled by the status
query or by an operator, human tasks approved, rejected or left by a cancel), and each
scenario's histories are exported (events and the commands that caused them) to
``<out>/<scenario>.jsonl``.

    python -m ops.record_histories --out tests/histories [--only NAME ...]

Regenerate the corpus only on purpose: it is what ``keel replay-check`` holds new code
to (docs/versioning.md).
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ops.fakes import serving
from ops.fakes.booking import BookingClient
from ops.fakes.ledger import LedgerClient
from orchestrator.client.client import KeelClient
from orchestrator.client.history_io import read_topic_history, write_history
from orchestrator.client.human_task_decisions import DecisionStatus, TaskDesk
from orchestrator.client.run_views import RunSummary
from orchestrator.config.settings import Settings, load_settings
from orchestrator.domain.model.messages import RedriveActivity, SignalWorkflow
from orchestrator.examples import app
from orchestrator.io.kafka.topics import create_topics
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.trust.human_task_tokens import TaskTokens

WAIT_S = 60.0


@contextmanager
def _process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _fake(name: str) -> AbstractContextManager[str]:
    """A fake service (``ops/fakes/<name>.py``) on a free port; yields its base URL."""
    return serving.running(f"ops.fakes.{name}", name)


class Recorder:
    """Drives the scenarios through a client and the fakes' fault switches."""

    def __init__(
        self,
        client: KeelClient,
        ledger: LedgerClient,
        tokens: TaskTokens | None = None,
        booking: BookingClient | None = None,
    ) -> None:
        self.client, self.ledger = client, ledger
        self.tokens = tokens
        self.booking = booking
        self.tasks = TasksView(client.projection.r, client.settings.topic_prefix)
        self.desk = TaskDesk(client.settings, self.tasks, client.send_as, wait_s=WAIT_S)

    def start(self, wf: str, name: str, input_obj: Any) -> str:
        self.client.start(name, input_obj, wf)
        return wf

    def wait(self, wf: str, status: str, *, past_attention: bool = False) -> RunSummary:
        """Wait for ``wf`` to end (or need attention, unless ``past_attention``)."""
        found = self.client.wait(wf, WAIT_S, stop_on_attention=not past_attention)
        if found.status != status:
            raise RuntimeError(f"{wf} is {found.status}, expected {status}")
        return found

    def wait_status(self, wf: str, status: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while (self.client.projection.get(wf) or {}).get("status") != status:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{wf} did not reach {status}")
            time.sleep(0.1)

    # -- scenarios: each returns the workflow ids it ran -------------------------------

    def document_review(self) -> list[str]:
        ok = self.start("review-approved", "document_review", {"document": "passport"})
        self.wait_status(ok, "waiting")
        self.client.signal(ok, "documents_added", {"document": "payslip"})
        time.sleep(1.0)  # the second review asks again
        self.wait_status(ok, "waiting")
        self.client.signal(ok, "documents_added", {"document": "contract"})
        self.wait(ok, "completed")
        early = self.start("review-signal-early", "document_review", {"document": "id"})
        for doc in ("a", "b"):  # sent right behind the start: they wait in the inbox
            self.client.send(
                early, SignalWorkflow("documents_added", json.dumps({"document": doc}))
            )
        self.wait(early, "completed")
        rejected = self.start("review-rejected", "document_review", {"document": "fraud"})
        self.wait(rejected, "completed")
        cancelled = self.start("review-cancelled", "document_review", {"document": "x"})
        self.wait_status(cancelled, "waiting")
        self.client.cancel(cancelled, "the customer withdrew")
        self.wait(cancelled, "cancelled")
        return [ok, early, rejected, cancelled]

    def dags(self) -> list[str]:
        a = self.start("parallel-checks", "parallel_checks", {"n": 7})
        b = self.start("three-step", "three_step", {"n": 3})
        c = self.start("timer-demo", "timer_demo", {"seconds": 1.5})
        for wf in (a, b, c):
            self.wait(wf, "completed")
        return [a, b, c]

    def timeouts(self) -> list[str]:
        ok = self.start("slow-step-heartbeats", "slow_step", {"seconds": 1.0, "heartbeat": True})
        self.wait(ok, "completed")
        silent = self.start("slow-step-no-heartbeat", "slow_step", {"seconds": 1.5})
        self.wait(silent, "failed")  # the 0.6 s heartbeat timeout
        late = self.start("slow-step-too-long", "slow_step", {"seconds": 3, "heartbeat": True})
        self.wait(late, "failed")  # the 2 s start-to-close timeout
        return [ok, silent, late]

    def invoices(self) -> list[str]:
        led = self.ledger
        ok = self.start("invoice-ok", "invoice_posting", _invoice("A-1", 10))
        self.wait(ok, "completed")
        led.set_faults(status_500=2)
        retried = self.start("invoice-retried", "invoice_posting", _invoice("A-2", 20))
        self.wait(retried, "completed")
        led.set_faults(status_429=0, status_500=0, drop_after_commit=1)
        dropped = self.start("invoice-unknown-found", "invoice_posting", _invoice("A-3", 30))
        self.wait(dropped, "completed")  # the status query found the posting
        led.reset()
        refused = self.start("invoice-refused", "invoice_posting", _invoice("A-4", 5, ""))
        self.wait(refused, "failed")
        led.set_faults(status_500=6)  # more refusals than invoice_posting would take
        patient = self.start("invoice-patient", "invoice_posting_patient", _invoice("A-5", 60))
        self.wait(patient, "completed")
        return [ok, retried, dropped, refused, patient]

    def dead_letter(self) -> list[str]:
        self.ledger.set_faults(down=True)
        wf = self.start("invoice-dead-lettered", "invoice_posting", _invoice("B-1", 40))
        self.wait(wf, "needs_attention")
        self.ledger.set_faults(down=False)
        self.client.send(wf, RedriveActivity("run#1/post"))
        self.wait(wf, "completed", past_attention=True)
        return [wf]

    def attention(self) -> list[str]:
        led = self.ledger
        led.reset()
        led.set_faults(delay_s=3.0, delay_count=1)
        wf = self.start("invoice-unknown-resolved", "invoice_posting", _invoice("C-1", 50))
        deadline = time.monotonic() + WAIT_S
        while not led.ledger()["total_effects"]:  # committed; the answer comes too late
            if time.monotonic() > deadline:
                raise RuntimeError("the posting never reached the ledger")
            time.sleep(0.05)
        led.set_faults(down=True)  # the status query cannot tell
        self.wait(wf, "needs_attention")
        led.set_faults(down=False)
        posting = led.ledger()["postings"][0]
        result = {"posting_id": posting["posting_id"], "key": posting["key"]}
        self.client.resolve(wf, "run#1/post", "found", result, "checked the ledger by hand")
        self.wait(wf, "completed", past_attention=True)
        return [wf]

    def open_task(self, wf: str) -> dict[str, Any]:
        """The open human task of ``wf``, once the inbox shows it."""
        deadline = time.monotonic() + WAIT_S
        while True:
            for t in self.tasks.list():
                if t["workflow_id"] == wf:
                    return t
            if time.monotonic() > deadline:
                raise RuntimeError(f"{wf} opened no human task")
            time.sleep(0.1)

    def decide(self, task: dict[str, Any], actor: str, roles: list[str], decision: str) -> None:
        assert self.tokens is not None
        token = self.tokens.issue(task["task_id"])
        digest = task["operation_digest"]
        out = self.desk.decide(token, actor, roles, decision, f"{decision}d by {actor}", digest)
        if out.status != DecisionStatus.DECIDED:
            raise RuntimeError(f"{decision} of {task['task_id']}: {out.status} {out.reason}")

    def approvals(self) -> list[str]:
        payment = {"account": "acc-9", "amount": 12.5, "requested_by": "sam"}
        paid = self.start("payment-approved", "payment_approval", {"payment_id": "P-1", **payment})
        self.decide(self.open_task(paid), "fin-1", ["finance-approver"], "approve")
        self.wait(paid, "completed")
        rejected = self.start(
            "payment-rejected", "payment_approval", {"payment_id": "P-2", **payment}
        )
        self.decide(self.open_task(rejected), "fin-2", ["finance-approver"], "reject")
        self.wait(rejected, "completed")
        withdrawn = self.start(
            "payment-withdrawn", "payment_approval", {"payment_id": "P-3", **payment}
        )
        self.open_task(withdrawn)
        self.client.cancel(withdrawn, "the request was withdrawn")
        self.wait(withdrawn, "cancelled")
        return [paid, rejected, withdrawn]

    def travel(self) -> list[str]:
        """Compensation: a booked trip, a declined card (flight then hotel cancelled) and a
        cancellation that keeps failing (compensation_failed and a human task)."""
        assert self.booking is not None
        self.booking.reset()
        ok = self.start("trip-booked", "travel_booking", _trip("T1", "4242424242424242"))
        self.wait(ok, "completed")
        declined = self.start("trip-declined", "travel_booking", _trip("T2", "4000000000000002"))
        self.wait(declined, "compensated")
        self.booking.set_faults(fail_cancels=["flight"])
        stuck = self.start("trip-cancel-stuck", "travel_booking", _trip("T3", "4000000000000002"))
        self.wait(stuck, "compensation_failed")
        self.booking.reset()
        return [ok, declined, stuck]

    def schedules(self) -> list[str]:
        """A schedule every second (docs/schedules.md): ticks that start runs, a pause, a
        resume and a delete, and the runs it started."""
        name = "corpus-every-1s"
        schedules = self.client.schedules
        schedules.create(name, "parallel_checks", {"n": 2}, every="1s")
        time.sleep(3.5)
        schedules.pause(name)
        time.sleep(2.0)
        schedules.resume(name)
        time.sleep(2.5)
        schedules.delete(name)
        self.wait(f"schedule:{name}", "completed")
        rows = self.client.projection.list(limit=100_000)
        runs = sorted(r["workflow_id"] for r in rows if r["workflow_id"].startswith(f"{name}:"))
        for wf in runs:
            self.wait(wf, "completed")
        return [f"schedule:{name}", *runs]

    def fan_out(self) -> list[str]:
        """A batch of invoices posted 5 at a time (docs/fan-out.md): one refused by the
        ledger (collected as null), one whose answer is lost after the commit (the
        status query finds it)."""
        self.ledger.reset()
        self.ledger.set_faults(drop_after_commit=1)
        invoices = [_invoice(f"F-{i}", 10 + i) for i in range(8)]
        invoices[5] = _invoice("F-5", 15, "")  # refused: no account
        wf = self.start("batch-fan-out", "invoice_batch", {"batch_id": "F", "invoices": invoices})
        self.wait(wf, "completed")
        self.ledger.reset()
        return [wf]

    def signal_with_start(self) -> list[str]:
        """Two signal-with-starts of one review (docs/workflows.md, "Signal-with-start"):
        the first starts the run with its signal, the second only signals."""
        wf = "review-signal-with-start"
        for doc in ("visa", "bank statement"):
            self.client.signal_with_start(
                wf, "documents_added", {"document": doc}, "document_review", {"document": "id"}
            )
        self.wait(wf, "completed")
        return [wf]

    def children(self) -> list[str]:
        """A parent mapping child runs over its input (docs/child-workflows.md), and a
        parent cancelled while its children wait, which cancels them."""
        done = self.start("batch-children", "checks_batch", {"numbers": [2, 3, 4]})
        self.wait(done, "completed")
        timers = self.start("batch-cancelled", "timers_batch", {"seconds": [600, 600]})
        kids = [f"{timers}:run.1.timers.{i}" for i in range(2)]
        for kid in kids:
            self.wait_status(kid, "waiting")
        self.client.cancel(timers, reason="withdrawn")
        for wf in (timers, *kids):
            self.wait(wf, "cancelled")
        return [done, *(f"{done}:run.1.checks.{i}" for i in range(3)), timers, *kids]

    def throttled(self) -> list[str]:
        """Eight documents summarized through a provider limited to 3 calls a second
        (docs/limits.md, "Per-type limits"): the items over the limit are reported
        throttled and dispatched again, spending no retry."""
        words = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]
        docs = [{"title": f"doc-{i}", "text": " ".join(words[i:] + words[:i])} for i in range(8)]
        wf = self.start("summaries-throttled", "summaries_batch", {"documents": docs})
        self.wait(wf, "completed")
        return [wf]

    def terminate(self) -> list[str]:
        """A waiting run terminated by an operator (docs/workflows.md, "Cancel and
        terminate"): it ends at once, compensating nothing."""
        wf = self.start("timer-terminated", "timer_demo", {"seconds": 600})
        self.wait_status(wf, "waiting")
        self.client.terminate(wf, reason="no longer needed")
        self.wait(wf, "terminated")
        return [wf]


def _trip(trip: str, card: str) -> dict[str, Any]:
    return {"trip": trip, "card": card, "amount": 420.0}


def _invoice(number: str, amount: float, account: str | None = None) -> dict[str, Any]:
    """An invoice; an empty ``account`` is refused by the ledger (a permanent failure)."""
    acct = f"acct-{number}" if account is None else account
    return {"invoice_id": number, "account": acct, "amount": amount}


SCENARIOS: dict[str, Callable[[Recorder], list[str]]] = {
    "document_review": Recorder.document_review,
    "dags": Recorder.dags,
    "timeouts": Recorder.timeouts,
    "invoices": Recorder.invoices,
    "dead_letter": Recorder.dead_letter,
    "attention": Recorder.attention,
    "approvals": Recorder.approvals,
    "travel": Recorder.travel,
    "schedules": Recorder.schedules,
    "fan_out": Recorder.fan_out,
    "signal_with_start": Recorder.signal_with_start,
    "children": Recorder.children,
    "throttled": Recorder.throttled,
    "terminate": Recorder.terminate,
}


def recording_env(settings: Settings, secret: str, **extra: str) -> dict[str, str]:
    """The environment of the recording's processes: this machine's, minus any KEEL_*
    of the caller, plus the recording's servers, prefix and a throwaway task-token key
    (the corpus holds only the hashes of tokens issued under it)."""
    return settings.child_environment(KEEL_TASK_TOKEN_SECRET=secret, **extra)


def record(settings: Settings, out: Path, only: list[str] | None = None) -> dict[str, int]:
    """Run the scenarios on the real stack; write one history file per scenario."""
    out.mkdir(parents=True, exist_ok=True)
    create_topics(settings)
    logs = Path(tempfile.mkdtemp(prefix=f"keel-record-{settings.topic_prefix}-"))
    secret = secrets.token_hex(32)
    tokens = TaskTokens(secret.encode(), "the recording")
    with _fake("ledger") as ledger_url, _fake("booking") as booking_url:
        env = recording_env(
            settings, secret, KEEL_LEDGER_URL=ledger_url, KEEL_BOOKING_URL=booking_url
        )
        with (
            _process(["orchestrator", "orchestrator"], env, logs / "orchestrator.log"),
            _process(["orchestrator", "worker"], env, logs / "worker.log"),
        ):
            client = KeelClient(settings, app)
            rec = Recorder(client, LedgerClient(ledger_url), tokens, BookingClient(booking_url))
            rec.ledger.reset()
            written = {}
            try:
                for name, scenario in SCENARIOS.items():
                    if only and name not in only:
                        continue
                    ids = scenario(rec)
                    envelopes = read_topic_history(settings, ids)
                    with (out / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
                        written[name] = write_history(envelopes, fh)
            finally:
                client.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/histories"))
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS))
    args = parser.parse_args(argv)
    base = load_settings()
    settings = base.model_copy(update={"topic_prefix": f"rec{uuid.uuid4().hex[:10]}"})
    written = record(settings, args.out, args.only)
    print(json.dumps({"topic_prefix": settings.topic_prefix, "lines": written}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
