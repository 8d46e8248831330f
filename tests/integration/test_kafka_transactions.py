"""The broker under every Keel test really does transactions: commit is seen, abort never is."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from tests.support import read_topic


@pytest.mark.unsound_history  # raw bytes on the events topic, not envelopes
def test_committed_records_are_seen_and_aborted_ones_never(settings):
    topic = settings.topic("events")
    producer = Producer(
        {
            "bootstrap.servers": settings.kafka_servers,
            "transactional.id": f"tx-{uuid.uuid4().hex}",
            "enable.idempotence": True,
        }
    )
    producer.init_transactions(30)

    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=f"wf-{i}", value=f"committed-{i}".encode())
    producer.commit_transaction(30)

    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=f"wf-{i}", value=f"aborted-{i}".encode())
    producer.flush(30)  # the records reach the log before the abort marker
    producer.abort_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, key="wf-last", value=b"committed-last")
    producer.commit_transaction(30)

    records = read_topic(settings.kafka_servers, topic, settings.partitions, expect_at_least=11)
    values = [r.value() for r in records]
    assert sorted(values) == sorted(
        [f"committed-{i}".encode() for i in range(10)] + [b"committed-last"]
    )
    assert not [v for v in values if v.startswith(b"aborted")]


def _open_transaction(settings, topic: str) -> Producer:
    """A producer with one committed record on partition 0 and two more in an open
    transaction: the partition's last stable offset is 2 (a and its commit's marker), its
    high watermark 4."""
    producer = Producer(
        {"bootstrap.servers": settings.kafka_servers, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key="wf-a", value=b"a", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key="wf-b", value=b"b", partition=0)
    producer.produce(topic, key="wf-c", value=b"c", partition=0)
    producer.flush(30)
    return producer


@pytest.mark.unsound_history  # raw bytes on the events topic, not envelopes
@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_a_rebuild_read_ends_only_past_a_transaction_open_when_it_began(settings, outcome):
    """A rebuild's read must not stop at the first EOF: that one comes at the last stable
    offset, before a transaction whose marker is not written yet, and after a broker loss
    that is a transaction already committed (seen in test_broker_loss: the runs it started
    were lost to the rebuild while their commands stayed consumed). The transaction here
    ends from inside the read, after the reader has polled past that first EOF many times."""
    from orchestrator.io.kafka.clients import high_watermarks, read_partitions

    topic = settings.topic("events")
    producer = _open_transaction(settings, topic)
    ends = high_watermarks(settings, topic, [0], deadline=time.monotonic() + 30)
    polls = 0

    def end_the_transaction_late() -> bool:
        nonlocal polls
        polls += 1
        if polls == 20:  # the reader reached the stable end long before this
            if outcome == "commit":
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        return False

    read = [
        m.value() for m in read_partitions(settings, topic, {0: 0}, stop=end_the_transaction_late)
    ]
    assert polls >= 20
    assert read == ([b"a", b"b", b"c"] if outcome == "commit" else [b"a"])
    assert ends == {0: 4}  # the open transaction's records too, not the stable 2
