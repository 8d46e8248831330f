"""A Redis Sentinel failover under load: the master is SIGKILLed, a replica is promoted, and
Keel goes on with no run lost and no effect twice.

Keel's Redis here is a Sentinel group of this test's own (ops/redis_sentinel.py: a master,
two replicas and three sentinels on ports from ``KEEL_TEST_SENTINEL_PORT``, 26400 by
default, stopped by PID); every Keel process and the test's client reach it by its
``redis+sentinel://`` URL. Kafka is the session's broker, never touched.

The proof is in the external systems' own books and in Kafka: the fake ledger counts one
posting per idempotency key, the commands topic one command per webhook, every run's
history ends once and keeps the invariants (tests/history_check.py).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psutil
import pytest
from pydantic import SecretStr

from connectors.webhooks import message_id
from handlers.effects import EffectStore, ReplicaAckMissing
from ops.redis_sentinel import SentinelGroup
from orchestrator.client.human_task_decisions import DecisionStatus, TaskDesk
from orchestrator.domain.model.errors import KeelError, UnavailableError
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    ActivityDeadLettered,
    ActivityScheduled,
    SignalReceived,
)
from orchestrator.io.redis.client_factory import REDIS_AWAY, RedisUse, redis_client
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.conftest import Servers
from tests.integration import test_connector as hook
from tests.support import (
    assert_sound_history,
    histories,
    longest_stall_s,
    read_topic,
    wait_until,
)

T = TypeVar("T")

SENTINEL_PORT = int(os.environ.get("KEEL_TEST_SENTINEL_PORT", "26400"))
POSTINGS = 40  # invoice_posting runs: an idempotent ledger POST each
REVIEWS = 4  # document_review runs driven by webhooks through the connector
APPROVALS = 4  # payment_approval runs decided at the task desk
#: A failover is detected within ``down_after_ms`` (1 s) and finished within a few more.
FAILOVER_BOUND_S = 15
APPROVER = ("fiona", ["finance-approver"])


@pytest.fixture
def sentinel_group(tmp_path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tmp_path / "sentinel-group", SENTINEL_PORT)
    group.up(timeout_s=60)
    try:
        yield group
    finally:
        stopped = group.down()
        assert all(not _alive(r.pid) for r in stopped)


@pytest.fixture
def servers(servers, sentinel_group):
    """The session's Kafka with the Sentinel group as Redis: the settings, services and
    client of tests/conftest.py use it (their histories are checked after the test)."""
    return Servers(servers.bootstrap_servers, sentinel_group.url)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


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


def test_a_client_finds_the_promoted_master_and_a_demoted_one_counts_as_away(sentinel_group):
    """The factory's client, unchanged, writes to whichever node Sentinel names; the
    effect store's records written before the kill are on the new master."""
    group = sentinel_group
    client = redis_client(group.url, RedisUse.WORKER_RECORDS)
    store = EffectStore(client, "failover-probe")
    assert store.begin("k1", 1, "owner-1").outcome == "run"
    store.commit("k1", '{"ok": 1}')
    assert client.wait(2, 2000) == 2, "both replicas have the record"
    old = group.master_port()
    assert old is not None
    group.kill_node(old)
    killed = time.monotonic()
    claim = through_outage(lambda: store.begin("k2", 1, "owner-2"), "a claim after the kill")
    new = group.wait_failover(old, FAILOVER_BOUND_S)
    print(f"claim through the failover after {time.monotonic() - killed:.2f}s; {old} -> {new}")
    assert claim.outcome == "run"
    assert client.connection_pool.get_master_address() == ("127.0.0.1", new)
    assert store.begin("k1", 1, "owner-3").outcome == "committed"
    assert store.get("k2")["state"] == "pending"

    # A node that is (or became) a replica refuses a script's write: Redis is "away"
    # for a writer, never "the request is wrong".
    replica = next(p for p in group.layout.data_ports if p not in (old, new))
    wait_until(lambda: group.node(replica).role()[0] == "slave", 30, "the other replica to follow")
    stale = EffectStore(group.node(replica), "failover-probe")
    with pytest.raises(REDIS_AWAY):
        stale.begin("k3", 1, "owner-4")


def test_an_effect_record_is_on_a_replica_before_the_worker_acts_on_it(sentinel_group):
    """``WAIT`` after each effect-record write: with every replica frozen the claim is
    "Redis away" (the gate repeats it), and the repeat by the same caller goes through."""
    group = sentinel_group
    store = EffectStore.from_url(group.url, "replica-acks")
    assert store.replica_acks == 1
    replicas = [p for p in group.layout.data_ports if p != group.master_port()]
    key = store.key("k1")
    assert store.begin("k1", 1, "owner-1").outcome == "run"
    assert any(group.node(p).hget(key, "state") == "pending" for p in replicas)

    frozen = [r.pid for r in group.records() if r.port in replicas]
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        with pytest.raises(ReplicaAckMissing) as info:
            store.commit("k1", '{"ok": 1}')
        assert isinstance(info.value, REDIS_AWAY)
        assert time.monotonic() - began < 2
        assert str(info.value) == ("0 of 1 replicas acknowledged an effect record within 500 ms")
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    store.commit("k1", '{"ok": 1}')  # the gate's repeat
    assert any(group.node(p).hget(key, "state") == "committed" for p in replicas)
    assert store.begin("k1", 1, "owner-2").outcome == "committed"


def _terminal(events: list) -> bool:
    return any(isinstance(e.payload, TERMINAL_EVENTS) for e in events)


def _watch_failover(group: SentinelGroup, old: int, out: list[tuple[int, float]]) -> None:
    """Append (new master's port, seconds since the kill) once the sentinels promoted one."""
    began = time.monotonic()
    port = group.wait_failover(old, FAILOVER_BOUND_S)
    out.append((port, time.monotonic() - began))


def _needs_documents(client, wf: str, documents: int) -> bool:
    try:
        progress = client.query(wf, "progress").value
    except (*REDIS_AWAY, KeelError):  # Redis away, or the run's row not there yet
        return False
    return progress["state"] == "needs_documents" and len(progress["documents"]) == documents


def test_a_master_sigkill_under_load_loses_no_run_and_repeats_no_effect(
    settings, services, client, ledger_url, ledger, sentinel_group
):
    group = sentinel_group
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

    old = group.master_port()
    assert old is not None
    promoted: list[tuple[int, float]] = []
    watcher = threading.Thread(target=_watch_failover, args=(group, old, promoted), daemon=True)
    group.kill_node(old, signal.SIGKILL)
    killed_at_ms = int(time.time() * 1000)
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

    waited: list[float] = []

    def decide_all() -> list:
        return [through_outage(lambda t=t: decide(t), "a decision", 30, waited) for t in open_tasks]

    with ThreadPoolExecutor(2) as pool:
        hooks, decisions = pool.submit(deliver_all), pool.submit(decide_all)
        delivered, outcomes = hooks.result(), decisions.result()
    for outcome in outcomes:
        assert outcome.status in (DecisionStatus.DECIDED, DecisionStatus.REPEATED), outcome
    watcher.join(FAILOVER_BOUND_S + 5)
    assert promoted, f"no replica promoted within {FAILOVER_BOUND_S}s"
    [(new, failover_s)] = promoted
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
    stall, began = longest_stall_s(by_wf, "post-", killed_at_ms)
    print(
        f"Redis master {old} SIGKILLed; replica {new} promoted after {failover_s:.2f}s; "
        f"longest stall {stall:.2f}s, from {began:.2f}s after the kill; "
        f"webhook deliveries during it: {[a for _, _, a in delivered]}; decisions that waited "
        f"for Redis: {[round(w, 2) for w in waited]}"
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
    print(f"commands per webhook sent during the failover (a repeat is decided once): {sent}")

    # The read model agrees with Kafka; a row a lost write left behind is re-derived by
    # the operator's rebuild (docs/operations.md, "Redis high availability").
    stale = _stale_rows(client, by_wf)
    if stale:
        print(f"{len(stale)} read-model rows behind Kafka after the failover: rebuilding")
        rebuilt = subprocess.run(
            [sys.executable, "-m", "orchestrator", "projections", "rebuild"],
            env=settings.child_environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
        assert _stale_rows(client, by_wf) == []


def _ending(events: list) -> str:
    return next(type(e.payload).__name__ for e in events if isinstance(e.payload, TERMINAL_EVENTS))


def _stale_rows(client, by_wf: dict[str, list]) -> list[str]:
    """Runs whose read-model row is missing or older than their last event in Kafka."""
    stale = []
    for wf, events in by_wf.items():
        row: Any = through_outage(lambda wf=wf: client.projection.get(wf), "a row")
        if row is None or int(row.get("seq", 0)) != events[-1].seq:
            stale.append(wf)
    return stale


def _invoice(i: int) -> dict:
    return {"invoice_id": f"I{i}", "account": "A", "amount": i}


def _payment(payment_id: str) -> dict:
    return {"payment_id": payment_id, "account": "acc-9", "amount": 12.5, "requested_by": "sam"}
