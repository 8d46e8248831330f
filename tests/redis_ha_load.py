"""One load of Redis-touching work through a real Kafka and a replicated Redis, and the
checks that nothing was lost or repeated: postings (an idempotent ledger POST each, so
effect records), reviews driven by webhooks through the connector (dedupe markers) and
approvals decided at the task desk (the human-task inbox), all folded by the projector
into the read model.

Shared by the Sentinel and Cluster failover tests (tests/fault/test_redis_failover.py,
tests/fault/test_redis_cluster_failover.py), which SIGKILL a master in the middle
(:class:`Failover`), and by the Cluster integration test, which runs it without a kill.
The proof is in the external systems' own books and in Kafka: the fake ledger counts one
posting per idempotency key, each webhook is one signal, every run ends once and its
history keeps the invariants (tests/history_check.py).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import SecretStr

from connectors.webhooks import message_id
from orchestrator.client.human_task_decisions import DecisionStatus, TaskDesk
from orchestrator.domain.model.errors import KeelError, UnavailableError
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    ActivityDeadLettered,
    ActivityScheduled,
    SignalReceived,
)
from orchestrator.io.redis.client_factory import REDIS_AWAY
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.integration import test_connector as hook
from tests.support import assert_sound_history, histories, longest_stall_s, read_topic, wait_until

T = TypeVar("T")

POSTINGS = 40  # invoice_posting runs: an idempotent ledger POST each
REVIEWS = 4  # document_review runs driven by webhooks through the connector
APPROVALS = 4  # payment_approval runs decided at the task desk
APPROVER = ("fiona", ["finance-approver"])


@dataclass(frozen=True)
class Failover:
    """How a test breaks its Redis: ``kill()`` SIGKILLs a master and returns its port;
    ``wait(old)`` returns the port of the master that replaced it, within ``bound_s``."""

    kill: Callable[[], int]
    wait: Callable[[int], int]
    bound_s: float


@dataclass
class LoadReport:
    """What the load saw: every run's events (from Kafka), the failover (None without
    one), the longest stall of the postings after the kill, what the senders repeated."""

    by_wf: dict[str, list]
    promoted: tuple[int, int, float] | None = None  # (old port, new port, seconds)
    stall_s: float = 0.0
    waited: list[float] = field(default_factory=list)
    rebuilt: int = 0  # rows behind Kafka that the operator's rebuild re-derived


def through_outage(
    fn: Callable[[], T], what: str, timeout_s: float = 30, waited: list[float] | None = None
) -> T:
    """``fn()`` retried while Redis is away (as the worker's gate does), for the test's own
    calls; anything else is raised. ``waited`` gets the seconds it waited, if any."""
    began = time.monotonic()
    deadline = began + timeout_s
    away = False
    while True:
        try:
            value = fn()
            if waited is not None and away:
                waited.append(time.monotonic() - began)
            return value
        except (*REDIS_AWAY, UnavailableError):
            away = True
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: Redis still away after {timeout_s}s") from None
            time.sleep(0.05)


def run_load(
    settings, services, client, ledger_url, ledger, failover: Failover | None
) -> LoadReport:
    """Start Keel's services on ``settings`` (Redis: the test's replicated one), run the
    load, break Redis with ``failover`` half-way, and check every promise."""
    ledger.set_faults(dedupe=False)  # a second POST of one key would be a second posting
    secret = secrets.token_hex(32)
    services.env.update(KEEL_LEDGER_URL=ledger_url, KEEL_TASK_TOKEN_SECRET=secret)
    services.start("orchestrator")
    services.start("worker")
    _, url = hook.start_connector(services)
    assert (
        client.wait(client.start("invoice_posting", _invoice(0), "warm").workflow_id, 90).status
        == "completed"
    )

    # Before the kill: approvals wait in the inbox, reviews wait for documents, postings run.
    tasks = TasksView(client.projection.r, settings.topic_prefix)
    for i in range(APPROVALS):
        client.start("payment_approval", _payment(f"pay-{i}"), f"pay-{i}")
    reviews = [f"review-{i}" for i in range(REVIEWS)]
    for wf in reviews:
        assert hook.deliver(url, hook.requested(f"{wf}-start", wf, "invoice 7"))[0] == 202

    def all_open() -> list[dict[str, Any]] | None:
        found = tasks.list()
        return found if len(found) == APPROVALS else None

    open_tasks = wait_until(all_open, 60, "the approvals in the inbox")
    signer = settings.model_copy(update={"task_token_secret": SecretStr(secret)})
    desk = TaskDesk(signer, tasks, client.send_as, wait_s=30)
    tokens = TaskTokens(secret.encode(), "tests")
    for wf in reviews:
        wait_until(lambda wf=wf: _needs_documents(client, wf, 1), 60, f"{wf} to wait")
    client.start_many(
        "invoice_posting", [(f"post-{i}", _invoice(i)) for i in range(1, POSTINGS // 2)]
    )
    wait_until(lambda: len(ledger.ledger()["calls"]) > 5, 60, "postings to flow")

    promoted: list[tuple[int, int, float]] = []
    watcher = None
    killed_at_ms = int(time.time() * 1000)
    if failover is not None:
        old = failover.kill()
        killed_at_ms = int(time.time() * 1000)
        began = time.monotonic()

        def watch() -> None:
            promoted.append((old, failover.wait(old), time.monotonic() - began))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

    # During the failover: more postings, a webhook per review (a sender retrying what is
    # answered 503) and every approval decided (retried while Redis is away), side by side.
    client.start_many(
        "invoice_posting", [(f"post-{i}", _invoice(i)) for i in range(POSTINGS // 2, POSTINGS)]
    )

    def deliver_all() -> list:
        return [
            hook.deliver_until_accepted(url, hook.added(f"{wf}-1", wf, "receipt")) for wf in reviews
        ]

    def decide(task: dict[str, Any]) -> Any:
        token = tokens.issue(task["task_id"])
        return desk.decide(token, *APPROVER, "approve", "ok", task["operation_digest"])

    report = LoadReport(by_wf={})

    def decide_all() -> list:
        return [
            through_outage(lambda t=t: decide(t), "a decision", 30, report.waited)
            for t in open_tasks
        ]

    with ThreadPoolExecutor(2) as pool:
        hooks, decisions = pool.submit(deliver_all), pool.submit(decide_all)
        delivered, outcomes = hooks.result(), decisions.result()
    for outcome in outcomes:
        assert outcome.status in (DecisionStatus.DECIDED, DecisionStatus.REPEATED), outcome
    if failover is not None:
        assert watcher is not None
        watcher.join(failover.bound_s + 5)
        assert promoted, f"no replica promoted within {failover.bound_s}s"
        report.promoted = promoted[0]
    for wf in reviews:
        wait_until(lambda wf=wf: _needs_documents(client, wf, 2), 60, f"{wf}'s second wait")
        status, _, attempts = hook.deliver_until_accepted(
            url, hook.added(f"{wf}-2", wf, "contract")
        )
        assert status == 202, attempts

    # Every run ends, by Kafka's account (the source of truth, whatever Redis lost).
    expected = {"warm"} | {f"post-{i}" for i in range(1, POSTINGS)} | set(reviews)
    expected |= {f"pay-{i}" for i in range(APPROVALS)}

    def all_ended() -> dict[str, list] | None:
        by_wf = histories(settings)
        return by_wf if all(_terminal(by_wf.get(wf, [])) for wf in expected) else None

    by_wf = wait_until(all_ended, 120, "every run to end", interval_s=1.0)
    report.by_wf = by_wf
    report.stall_s, stall_began = longest_stall_s(by_wf, "post-", killed_at_ms)
    if report.promoted is not None:
        old, new, failover_s = report.promoted
        print(
            f"Redis master {old} SIGKILLed; replica {new} promoted after {failover_s:.2f}s; "
            f"longest stall {report.stall_s:.2f}s, from {stall_began:.2f}s after the kill; "
            f"webhook deliveries during it: {[a for _, _, a in delivered]}; decisions that "
            f"waited for Redis: {[round(w, 2) for w in report.waited]}"
        )

    # The ledger's books: one posting per key, every key posted.
    book = ledger.ledger()
    keys = {f"post-{i}/post_to_ledger/1" for i in range(1, POSTINGS)} | {"warm/post_to_ledger/1"}
    assert set(book["effects"]) == keys
    assert set(book["effects"].values()) == {1}, "exactly one posting per key"
    # The commands topic: each webhook once, each review saw its documents once.
    for wf in reviews:
        signals = [e for e in by_wf[wf] if isinstance(e.payload, SignalReceived)]
        assert len(signals) == 2, f"{wf}: {len(signals)} signals"
        assert _ending(by_wf[wf]) == "WorkflowCompleted"
    for wf in expected:
        assert_sound_history(wf, by_wf[wf])
        assert not any(isinstance(e.payload, ActivityDeadLettered) for e in by_wf[wf])
        posts = [e.payload for e in by_wf[wf] if isinstance(e.payload, ActivityScheduled)
                 and e.payload.activity_type == "post_to_ledger"]  # fmt: skip
        assert [p.attempt for p in posts] in ([], [1]), f"{wf}: the failover spent an attempt"
    dlq = read_topic(settings.kafka_servers, settings.topic("dlq"), settings.partitions, max_s=2)
    assert dlq == [], "no dead letter"
    sent = {
        wf: hook.commands_with_id(settings, message_id(hook.SOURCE, f"{wf}-1")) for wf in reviews
    }
    print(f"commands per webhook sent during the load (a repeat is decided once): {sent}")

    # The read model agrees with Kafka; a row a lost write left behind is re-derived by
    # the operator's rebuild (docs/operations.md, "Redis high availability").
    stale = stale_rows(client, by_wf)
    if stale:
        print(f"{len(stale)} read-model rows behind Kafka after the failover: rebuilding")
        rebuild(settings)
        assert stale_rows(client, by_wf) == []
        report.rebuilt = len(stale)
    return report


def rebuild(settings) -> None:
    """``keel projections rebuild``, as an operator runs it."""
    rebuilt = subprocess.run(
        [sys.executable, "-m", "orchestrator", "projections", "rebuild"],
        env=settings.child_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]


def stale_rows(client, by_wf: dict[str, list]) -> list[str]:
    """Runs whose read-model row is missing or older than their last event in Kafka."""
    stale = []
    for wf, events in by_wf.items():
        row: Any = through_outage(lambda wf=wf: client.projection.get(wf), "a row")
        if row is None or int(row.get("seq", 0)) != events[-1].seq:
            stale.append(wf)
    return stale


def _terminal(events: list) -> bool:
    return any(isinstance(e.payload, TERMINAL_EVENTS) for e in events)


def _ending(events: list) -> str:
    return next(type(e.payload).__name__ for e in events if isinstance(e.payload, TERMINAL_EVENTS))


def _needs_documents(client, wf: str, documents: int) -> bool:
    try:
        progress = client.query(wf, "progress").value
    except (*REDIS_AWAY, KeelError):  # Redis away, or the run's row not there yet
        return False
    return progress["state"] == "needs_documents" and len(progress["documents"]) == documents


def _invoice(i: int) -> dict:
    return {"invoice_id": f"I{i}", "account": "A", "amount": i}


def _payment(payment_id: str) -> dict:
    return {"payment_id": payment_id, "account": "acc-9", "amount": 12.5, "requested_by": "sam"}
