"""The Java Admin API helper (``ops/cluster.py``) on the suite's real broker.

The fault suite places coordinators with ``lead_partition`` and aims broker kills with
``cluster_roles``; ``remove_static_member`` takes a retired orchestrator out of its group.
Here each is checked against what the broker itself reports (on one broker: moving a
leader to a broker without a replica is refused; the three-broker moves are checked by
tests/fault/test_broker_loss.py, which reads every placed role back before a kill).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from ops.cluster import ClusterInfoError, cluster_roles, lead_partition, remove_static_member
from tests.conftest import KEEL_DIR

LIBS = KEEL_DIR / "kafka-libs"


@pytest.fixture(autouse=True)
def _broker_jars() -> None:
    if not LIBS.is_dir():
        pytest.skip(f"the broker's jars are not in {LIBS} (servers from testcontainers)")


def _members(bootstrap: str, group: str) -> list[str | None]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=20)
    return [m.group_instance_id for m in description.members]


def test_a_stopped_static_member_leaves_its_group_only_when_removed(settings):
    bootstrap = settings.bootstrap_servers
    group = f"{settings.topic_prefix}.static"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": "keel-a",
            "session.timeout.ms": 30000,
        }
    )
    consumer.subscribe([settings.topic("commands")])
    deadline = time.monotonic() + 60
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment(), "the static member was never assigned"
    consumer.close()

    assert _members(bootstrap, group) == ["keel-a"]  # closed, yet still a member
    assert remove_static_member(bootstrap, LIBS, group, "keel-a") is True
    assert _members(bootstrap, group) == []
    assert remove_static_member(bootstrap, LIBS, group, "keel-a") is False


def test_cluster_roles_names_the_controller_and_a_transaction_coordinator(settings):
    bootstrap = settings.bootstrap_servers
    tid = f"{settings.topic_prefix}.roles"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(settings.topic("commands"), b"x", key=b"k")
    producer.commit_transaction(30)
    brokers = set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20).brokers)

    assert len(brokers) == 1

    roles = cluster_roles(bootstrap, LIBS, (tid, "never-used-id"))
    assert roles.controller is not None and roles.controller in roles.voters
    assert roles.transaction_coordinators == {tid: next(iter(brokers)), "never-used-id": None}
    compiled = list((LIBS.parent / "admin-helper").glob("*/ClusterAdmin.class"))
    assert compiled, "the helper was not compiled once next to the jars"


def test_lead_partition_keeps_the_only_replica_and_refuses_a_broker_without_one(settings):
    bootstrap = settings.bootstrap_servers
    topic = settings.topic("commands")
    (broker,) = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20).brokers

    assert lead_partition(bootstrap, LIBS, topic, 0, broker) == broker
    with pytest.raises(ClusterInfoError, match=r"failed \(exit 2\): broker 99 holds no replica"):
        lead_partition(bootstrap, LIBS, topic, 0, 99)
