"""A Redis Cluster failover under load: the master of the busiest slot is SIGKILLed, its
replica takes the slots over, and Keel goes on with no run lost and no effect twice.

Keel's Redis here is a cluster of this test's own (ops/redis_ha/redis_cluster.py: three masters and
three replicas on ports from ``KEEL_TEST_REDIS_CLUSTER_PORT``, 30101 by default, stopped by
PID); every Keel process and the test's client reach it by its ``redis+cluster://`` URL.
Kafka is the session's broker, never touched. The busiest slot is the read model's
(``{<prefix>:rm}``: every projector write, every start's and decision's read), and its
master holds a third of the effect records and dedupe markers besides.

The load and its proof (the fake ledger's books, one signal per webhook, every history
sound, a read model that a rebuild makes equal to Kafka) are tests/redis_ha_load.py's,
shared with the Sentinel failover test.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from handlers.effects import EffectStore
from ops.redis_ha.redis_cluster import RedisClusterGroup
from orchestrator.io.redis.keyspace import Keyspace
from tests.conftest import Servers
from tests.redis_ha_load import Failover, run_load, through_outage

CLUSTER_PORT = int(os.environ.get("KEEL_TEST_REDIS_CLUSTER_PORT", "30101"))
#: A master is marked failed after ``node_timeout_ms`` (1 s) and its replica elected in a
#: few more.
FAILOVER_BOUND_S = 15


@pytest.fixture
def redis_cluster(tmp_path) -> Iterator[RedisClusterGroup]:
    group = RedisClusterGroup(tmp_path / "redis-cluster", CLUSTER_PORT)
    group.up(timeout_s=60)
    try:
        yield group
    finally:
        group.down()


@pytest.fixture
def servers(servers, redis_cluster):
    """The session's Kafka with the cluster as Redis: the settings, services and client of
    tests/conftest.py use it (their histories are checked after the test)."""
    return Servers(servers.bootstrap_servers, redis_cluster.url)


def test_an_effect_record_survives_its_masters_loss_and_a_claim_waits_for_the_replica(
    redis_cluster,
):
    """A record is on its master's replica before the store returns (``WAIT`` on the slot's
    own connection); after a SIGKILL of that master the same store, unchanged, claims
    through the failover and finds the record on the promoted replica."""
    group = redis_cluster
    store = EffectStore.from_url(group.url, "failover-probe")
    assert store.replica_acks == 1
    assert store.begin("k1", 1, "owner-1").outcome == "run"
    store.commit("k1", '{"ok": 1}')
    old, [replica] = group.owners_of(store.key("k1"))
    assert _on_replica(group, replica, store.key("k1")) == "committed"

    group.kill_node(old, signal.SIGKILL)
    killed = time.monotonic()
    claim = through_outage(lambda: store.begin("k1", 2, "owner-2"), "a claim after the kill")
    new = group.wait_failover(old, store.key("k1"), FAILOVER_BOUND_S)
    print(f"claim through the failover after {time.monotonic() - killed:.2f}s; {old} -> {new}")
    assert new == replica
    assert (claim.outcome, claim.result_json) == ("committed", '{"ok": 1}')
    assert store.begin("k2", 1, "owner-3").outcome == "run"


def _on_replica(group: RedisClusterGroup, port: int, key: str) -> str | None:
    """A record's state as a replica holds it (``READONLY``: a replica answers reads of
    its master's slots on that connection instead of redirecting them)."""
    with group.node(port) as node:
        pipe = node.pipeline(transaction=False)
        pipe.execute_command("READONLY")
        pipe.hget(key, "state")
        return pipe.execute()[1]


def test_the_busiest_slots_master_sigkilled_under_load_loses_no_run_and_repeats_no_effect(
    settings, services, client, ledger_url, ledger, redis_cluster
):
    group = redis_cluster
    busiest = Keyspace.for_url(settings.topic_prefix, settings.redis).workflow("any")
    began = time.monotonic()

    def kill() -> int:
        old = group.master_of(busiest)
        group.kill_node(old, signal.SIGKILL)
        return old

    failover = Failover(
        kill, lambda old: group.wait_failover(old, busiest, FAILOVER_BOUND_S), FAILOVER_BOUND_S
    )
    report = run_load(settings, services, client, ledger_url, ledger, failover)
    assert report.promoted is not None
    old, new, _ = report.promoted
    assert group.master_of(busiest) == new != old
    with group.node(new) as node:
        assert node.cluster("info")["cluster_state"] == "ok"
    print(
        f"load through the failover in {time.monotonic() - began:.1f}s; read-model rows "
        f"behind Kafka re-derived by the rebuild: {report.rebuilt}"
    )
