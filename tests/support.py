"""Small helpers shared by integration tests (real Kafka only)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition


def read_topic(
    bootstrap: str, topic: str, partitions: int, expect_at_least: int = 0, max_s: float = 60
) -> list:
    """Every committed record of ``topic`` (read_committed), in partition order.

    Reads until each partition reported its end and at least ``expect_at_least``
    records arrived, or ``max_s`` passed.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records = []
    at_eof: set[int] = set()
    try:
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.25)
            if msg is None:
                if len(at_eof) == partitions and len(records) >= expect_at_least:
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            at_eof.discard(msg.partition())
            records.append(msg)
    finally:
        consumer.close()
    return records
