"""What Kafka alone costs on this machine, measured beside Keel in the same bench run.

``keel bench`` reports what a user feels; this module measures, with Keel's own client
settings and nothing of Keel around them, the two floors those figures stand on:

* :func:`hop` — one orchestrator-like hop done with bare clients: a command produced and
  acknowledged (``acks=all``), consumed ``read_committed``, a transaction that appends a
  three-step run's events and commits the consumer offset, and a ``read_committed``
  reader seeing its last record. A local-activity run is exactly one such hop, so its
  client-observed latency minus this floor is what Keel itself adds.
* :func:`read_ceiling` — records per second a Python consumer reads (headers included)
  from a topic with the reader a rebuild uses (``kafka.read_partitions``): no rebuild
  from that topic can be faster on this machine.

Both are ratios' denominators, not targets (docs/performance.md, "Kafka's floor").
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ops.bench_rig import _percentile
from orchestrator.config.settings import Settings
from orchestrator.io.kafka.clients import (
    admin_config,
    consumer_config,
    producer_config,
    read_partitions,
    transactional_producer,
)

__all__ = ["hop", "read_ceiling"]

#: Events one local three-step run commits in its single transaction.
EVENTS_PER_HOP = 9
EVENT_BYTES = 300
COMMAND_BYTES = 200


class _Watch(threading.Thread):
    """A ``read_committed`` reader noting when each hop's last record became visible."""

    def __init__(self, settings: Settings, topic: str) -> None:
        super().__init__(daemon=True, name="floor-watch")
        self.consumer = Consumer(consumer_config(settings, f"{topic}.watch"))
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.seen: dict[bytes, float] = {}
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            msg = self.consumer.poll(0.05)
            if msg is None or msg.error() is not None:
                continue
            key = msg.key()
            if msg.value() == b"last" and key is not None:
                self.seen[key] = time.perf_counter()

    def wait_for(self, key: bytes, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while key not in self.seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the floor probe's hop {key!r} never became visible")
            time.sleep(0.0002)
        return self.seen[key]

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(5)
        self.consumer.close()


def hop(settings: Settings, count: int = 60, gap_s: float = 0.05) -> dict[str, float]:
    """Median and p99 of ``count`` bare hops, one at a time ``gap_s`` apart (light load).

    Medians of the parts: ``client_ack_ms`` (produce until Kafka acknowledged),
    ``intake_ms`` (acknowledged until the consumer has it), ``send_offsets_ms`` and
    ``commit_ms`` (the transaction's two blocking calls), ``visible_ms`` (commit returned
    until the reader sees the last record). ``hop_*`` is produce until visible.
    """
    prefix = f"{settings.topic_prefix}.floor-{uuid.uuid4().hex[:6]}"
    cmd, ev = f"{prefix}.commands", f"{prefix}.events"
    admin = AdminClient(admin_config(settings))
    for future in admin.create_topics([NewTopic(cmd, 1, 1), NewTopic(ev, 1, 1)]).values():
        future.result(settings.admin_timeout_s)
    client = Producer(producer_config(settings, **{"linger.ms": 0}))
    txn = transactional_producer(settings, f"{prefix}.txn")
    intake = Consumer(consumer_config(settings, f"{prefix}.intake"))
    intake.assign([TopicPartition(cmd, 0, 0)])
    watch = _Watch(settings, ev)
    watch.start()
    parts: dict[str, list[float]] = {
        k: [] for k in ("client_ack_ms", "intake_ms", "send_offsets_ms", "commit_ms", "visible_ms")
    }
    total: list[float] = []
    warm = 5
    try:
        meta = intake.consumer_group_metadata()
        for i in range(count + warm):
            key = str(i).encode()
            t0 = time.perf_counter()
            client.produce(cmd, b"c" * COMMAND_BYTES, key)
            client.flush(settings.admin_timeout_s)
            t1 = time.perf_counter()
            msg: Any = None
            while msg is None or msg.error() is not None:
                msg = intake.poll(settings.admin_timeout_s)
            t2 = time.perf_counter()
            txn.begin_transaction()
            for _ in range(EVENTS_PER_HOP - 1):
                txn.produce(ev, b"e" * EVENT_BYTES, key)
            txn.produce(ev, b"last", key)
            offsets = [TopicPartition(cmd, 0, msg.offset() + 1)]
            t3 = time.perf_counter()
            txn.send_offsets_to_transaction(offsets, meta, settings.admin_timeout_s)
            t4 = time.perf_counter()
            txn.commit_transaction(settings.admin_timeout_s)
            t5 = time.perf_counter()
            t6 = watch.wait_for(key, settings.admin_timeout_s)
            if i >= warm:
                for name, ms in zip(
                    parts, (t1 - t0, t2 - t1, t4 - t3, t5 - t4, max(0.0, t6 - t5)), strict=True
                ):
                    parts[name].append(ms * 1000)
                total.append((t6 - t0) * 1000)
            time.sleep(gap_s)
    finally:
        watch.stop()
        intake.close()
        client.flush(5)
        admin.delete_topics([cmd, ev])
    out = {k: round(statistics.median(v), 2) for k, v in parts.items()}
    out["hop_p50_ms"] = round(statistics.median(total), 2)
    out["hop_p99_ms"] = round(_percentile(total, 0.99), 2)
    return out


def read_ceiling(settings: Settings, topic: str) -> dict[str, float]:
    """Every committed record of ``topic`` read once, headers taken: records per second."""
    consumer = Consumer(consumer_config(settings, f"{topic}.ceiling"))
    try:
        meta = consumer.list_topics(topic, timeout=settings.admin_timeout_s)
        partitions = list(meta.topics[topic].partitions)
    finally:
        consumer.close()
    began = time.monotonic()
    n = 0
    for msg in read_partitions(settings, topic, dict.fromkeys(partitions, 0), batch=10_000):
        msg.headers()
        n += 1
    took = time.monotonic() - began
    return {"records": n, "records_per_s": round(n / took, 1) if took > 0 else 0.0}
