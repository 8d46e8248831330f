"""Keel on a Redis Cluster: three masters and three replicas of this module's own
(ops/redis_ha/redis_cluster.py, on ports from ``KEEL_TEST_REDIS_CLUSTER_PORT``, 30101 by default,
stopped by PID), reached by its ``redis+cluster://`` URL; Kafka is the session's.

The load of tests/redis_ha_load.py (postings through the worker's effect records, reviews
driven by webhooks through the connector's dedupe markers, approvals decided at the task
desk from the inbox) runs with no fault, and the keys it leaves are where
orchestrator/io/redis/keyspace.py says: the read model in one slot, the effect records
spread over the masters. Existing Redis integration tests (type limits, effect records,
dead-letter claims, a rebuild under traffic) run here again, unchanged, on the cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from ops.redis_ha.redis_cluster import RedisClusterGroup
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from orchestrator.io.redis.keyspace import Keyspace
from tests.conftest import Servers

# Existing tests, collected again here: they run on this module's ``servers``, the cluster.
from tests.integration.test_dlq_redrive import (  # noqa: F401
    test_two_operators_redriving_one_letter_send_it_once,
)
from tests.integration.test_effect_store import (  # noqa: F401
    store,
    test_a_definite_failure_releases_the_claim_but_keeps_older_attempts_fenced,
    test_a_redelivered_pending_attempt_is_in_doubt_and_a_retry_may_claim,
    test_effect_records_survive_a_read_model_rebuild,
)
from tests.integration.test_read_model import (  # noqa: F401
    test_a_rebuild_under_traffic_leaves_every_history_whole,
)

# (not test_a_rate_reserves_the_next_slot_for_the_key_and_keeps_it: it allows 100 ms between
# two admissions and reads the usage between them with a new client, which on a cluster first
# reads the slot map and the command table (about 20 ms idle): in one of two runs on this
# shared machine the gap grew to 106 ms)
from tests.integration.test_type_limits import (  # noqa: F401
    test_leases_bound_concurrency_and_a_dead_workers_lease_expires,
    test_prefixes_do_not_share_limits,
)
from tests.redis_ha_load import rebuild, run_load, stale_rows

CLUSTER_PORT = int(os.environ.get("KEEL_TEST_REDIS_CLUSTER_PORT", "30101"))


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory) -> Iterator[RedisClusterGroup]:
    group = RedisClusterGroup(tmp_path_factory.mktemp("redis-cluster"), CLUSTER_PORT)
    group.up(timeout_s=60)
    try:
        yield group
    finally:
        group.down()


@pytest.fixture(scope="module")
def servers(servers, redis_cluster) -> Servers:
    """The session's Kafka with the cluster as Redis, for every fixture of this module."""
    return Servers(servers.bootstrap_servers, redis_cluster.url)


def test_a_load_of_activities_webhooks_and_human_tasks_runs_on_a_cluster(
    settings, services, client, ledger_url, ledger, redis_cluster
):
    report = run_load(settings, services, client, ledger_url, ledger, failover=None)
    assert report.rebuilt == 0, "with no fault the read model kept up with Kafka"

    ks = Keyspace.for_url(settings.topic_prefix, settings.redis)
    r = redis_client(settings.redis, RedisUse.READ_MODEL)
    read_model = list(r.scan_iter(match=f"{ks.read_model}*", count=1000))
    assert ks.workflow("post-1") in read_model and ks.history("pay-0") in read_model
    assert {key_slot(k.encode()) for k in read_model} == {key_slot(ks.read_model.encode())}
    effects = list(r.scan_iter(match=f"{ks.effects}*", count=1000))
    assert len(effects) == len(report.by_wf) - 4 - 4  # one per posting (reviews and
    masters = {redis_cluster.master_of(k) for k in effects}  # approvals post nothing)
    assert len(masters) == 3, f"effect records spread over every master: {masters}"
    assert list(r.scan_iter(match=f"{ks.root}:dd:*", count=1000)), "the webhooks' markers"

    rebuild(settings)  # the operator's rebuild, on a cluster: the same rows again
    assert stale_rows(client, report.by_wf) == []
    listed = {row["workflow_id"] for row in client.projection.list(limit=1000)}
    assert listed == set(report.by_wf)
    assert client.projection.counts()["completed"] == len(report.by_wf)
