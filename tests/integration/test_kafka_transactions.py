"""The broker under every Keel test really does transactions: commit is seen, abort never is."""

from __future__ import annotations

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
