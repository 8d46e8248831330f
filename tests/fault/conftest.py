"""One real three-broker KRaft cluster for the whole fault suite, and Keel on top of it.

The cluster runs under ``.keel/fault-cluster`` on ports of its own (clients 29092/29094/
29096, controllers the port after each), below Linux's ephemeral range so a restarted
broker never finds its port taken by some client's outgoing connection. It is started
once per session (a few tens of seconds); every test that uses it finds all three
brokers running and every replica in sync, and leaves it so: brokers a test killed are
started again afterwards (``LocalStack.up`` starts only what is down).

Keel's services and client for a test on the cluster come from ``cluster_settings`` /
``cluster_services`` / ``cluster_client``: their own topic prefix, replication factor 3
with ``min.insync.replicas=2`` (Keel's default on three brokers), and the session's Redis.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import psutil
import pytest

from ops.cluster import INTERNAL_TOPICS, under_replicated
from ops.local import LocalStack
from tests.conftest import KEEL_DIR, stack_settings

FAULT_CLUSTER_HOME = KEEL_DIR / "fault-cluster"
FAULT_KAFKA_PORT = int(os.environ.get("KEEL_FAULT_KAFKA_PORT", "29092"))
#: Unused (the cluster has no Redis of its own) but must be a valid, distinct port.
FAULT_REDIS_PORT = FAULT_KAFKA_PORT - 2700
HEAL_TIMEOUT_S = 120.0


def heal(stack: LocalStack, topics: list[str], timeout_s: float = HEAL_TIMEOUT_S) -> None:
    """Start every broker that is down and wait until each partition's ISR is complete."""
    stack.up(timeout_s=180)
    deadline = time.monotonic() + timeout_s
    lagging: list = []
    while time.monotonic() < deadline:
        try:
            lagging = under_replicated(stack.bootstrap_servers, topics)
        except Exception as exc:  # metadata briefly unavailable while a broker rejoins
            lagging = [str(exc)]
        if not lagging:
            return
        time.sleep(0.5)
    raise AssertionError(f"ISR not healed after {timeout_s:.0f}s: {lagging[:5]}")


@pytest.fixture(scope="session")
def cluster_stack() -> Iterator[LocalStack]:
    stack = LocalStack(
        stack_settings(FAULT_CLUSTER_HOME, FAULT_KAFKA_PORT, FAULT_REDIS_PORT),
        brokers=3,
        with_redis=False,
    )
    stack.down()  # what an interrupted earlier session left running
    shutil.rmtree(FAULT_CLUSTER_HOME / "kafka", ignore_errors=True)
    stack.up(timeout_s=180)
    try:
        yield stack
    finally:
        stopped = stack.down()
        assert not any(_exists(r.pid) for r in stopped)


@pytest.fixture
def cluster(cluster_stack: LocalStack) -> Iterator[LocalStack]:
    """The session's cluster, all brokers up and in sync before and after the test."""
    heal(cluster_stack, _internal_topics(cluster_stack))
    yield cluster_stack
    heal(cluster_stack, _internal_topics(cluster_stack))


@pytest.fixture
def cluster_settings(
    cluster: LocalStack, servers, topic_prefix: str, request: pytest.FixtureRequest
):
    """A test's prefix on the cluster; afterwards (every broker back) its histories
    must keep the invariants (tests/history_check.py)."""
    from orchestrator.config.settings import Settings
    from orchestrator.io.kafka.topics import create_topics
    from tests.history_check import verify_after_test

    s = Settings(
        bootstrap_servers=cluster.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=topic_prefix,
        partitions=4,
        home=FAULT_CLUSTER_HOME,
    )
    reports = create_topics(s)
    assert {(r.replication_factor, r.min_insync_replicas) for r in reports} == {(3, 2)}
    yield s
    heal(cluster, _internal_topics(cluster))  # a killed broker may lead the events topic
    verify_after_test(request, s)


@pytest.fixture
def cluster_services(cluster_settings, tmp_path):
    from tests.support import Services

    svc = Services(cluster_settings, tmp_path)
    try:
        yield svc
    finally:
        svc.stop_all()


@pytest.fixture
def cluster_client(cluster_settings):
    from orchestrator.client.client import KeelClient
    from orchestrator.examples import app

    c = KeelClient(cluster_settings, app)
    yield c
    c.close()


def _internal_topics(stack: LocalStack) -> list[str]:
    """Kafka's internal topics that exist yet (they are created on first use)."""
    from ops.cluster import admin

    existing = admin(stack.bootstrap_servers).list_topics(timeout=15).topics
    return [t for t in INTERNAL_TOPICS if t in existing]


def _exists(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
