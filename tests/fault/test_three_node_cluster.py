"""A three-node KRaft cluster keeps every acknowledged record when one broker is SIGKILLed."""

from __future__ import annotations

import time
import uuid

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ops.local import LocalStack
from tests.support import read_topic

TOTAL = 3000
KILL_AFTER = 1000


def _exists(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _leader(admin: AdminClient, topic: str, partition: int) -> int:
    """The leader of a new partition, once metadata has caught up with its creation."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if partition in parts and parts[partition].leader >= 0:
            return parts[partition].leader
        time.sleep(0.2)
    raise AssertionError(f"{topic}[{partition}] has no leader after 60s")


def test_acked_records_survive_sigkill_of_a_broker(cluster: LocalStack):
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"cluster-acks-{uuid.uuid4().hex[:8]}"  # the cluster serves the whole suite
    futures = admin.create_topics(
        [NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )
    futures[topic].result(60)
    leader_of_0 = _leader(admin, topic, 0)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "delivery.timeout.ms": 120000,
        }
    )
    acked: set[bytes] = set()
    failed: list[str] = []

    def on_delivery(err, msg):
        if err is None:
            acked.add(msg.value())
        else:
            failed.append(str(err))

    killed_pid = None
    for i in range(TOTAL):
        producer.produce(
            topic, key=str(i % 97).encode(), value=f"r{i}".encode(), on_delivery=on_delivery
        )
        producer.poll(0)
        if i == KILL_AFTER:
            producer.flush(60)
            assert len(acked) == KILL_AFTER + 1
            killed_pid = cluster.kill_broker(leader_of_0)
    assert producer.flush(120) == 0
    assert killed_pid is not None and not _exists(killed_pid)
    assert failed == []
    assert len(acked) == TOTAL

    survivors = ",".join(
        f"127.0.0.1:{cluster.client_port(n)}" for n in (1, 2, 3) if n != leader_of_0
    )
    read = {m.value() for m in read_topic(survivors, topic, 3, expect_at_least=TOTAL, max_s=120)}
    assert acked <= read
    assert len(read) == TOTAL
