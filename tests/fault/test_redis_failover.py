"""A Redis Sentinel failover under load: the master is SIGKILLed, a replica is promoted, and
Keel goes on with no run lost and no effect twice.

Keel's Redis here is a Sentinel group of this test's own (ops/redis_ha/redis_sentinel.py: a master,
two replicas and three sentinels on ports from ``KEEL_TEST_SENTINEL_PORT``, 26400 by
default, stopped by PID); every Keel process and the test's client reach it by its
``redis+sentinel://`` URL. Kafka is the session's broker, never touched.

The load and its proof (the fake ledger's books, one signal per webhook, every history
sound) are tests/redis_ha_load.py's, shared with the Cluster failover test.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest

from handlers.effects import EffectStore, ReplicaAckMissing
from ops.redis_ha.redis_sentinel import SentinelGroup
from orchestrator.io.redis.client_factory import REDIS_AWAY, RedisUse, redis_client
from tests.conftest import Servers
from tests.redis_ha_load import Failover, run_load, through_outage
from tests.support import wait_until

SENTINEL_PORT = int(os.environ.get("KEEL_TEST_SENTINEL_PORT", "26400"))
#: A failover is detected within ``down_after_ms`` (1 s) and finished within a few more.
FAILOVER_BOUND_S = 15


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


def test_a_master_sigkill_under_load_loses_no_run_and_repeats_no_effect(
    settings, services, client, ledger_url, ledger, sentinel_group
):
    group = sentinel_group

    def kill() -> int:
        old = group.master_port()
        assert old is not None
        group.kill_node(old, signal.SIGKILL)
        return old

    failover = Failover(
        kill, lambda old: group.wait_failover(old, FAILOVER_BOUND_S), FAILOVER_BOUND_S
    )
    report = run_load(settings, services, client, ledger_url, ledger, failover)
    assert report.promoted is not None
