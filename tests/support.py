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


class Services:
    """Keel service processes (orchestrator, worker, ...) started for one test.

    Each runs as ``python -m orchestrator <role>`` against the test's servers and topic
    prefix, logs to a file of its own, and is stopped by PID at the end of the test.
    """

    def __init__(self, settings, log_dir, **extra_env: str) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.procs: list = []
        self.env = settings.child_environment(KEEL_LOG_LEVEL="INFO", **extra_env)

    def start(self, role: str, *args: str, **env: str):
        import subprocess
        import sys

        log = self.log_dir / f"{role}-{len(self.procs)}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", role, *args],
            env={**self.env, **env},
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        proc.log_path = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def kill(self, proc, sig: int = 9) -> None:
        import os

        if proc.poll() is None:
            os.kill(proc.pid, sig)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        import signal

        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)


def decode_all(records) -> list:
    from orchestrator.codec import default_codec

    codec = default_codec()
    return [codec.decode(r.value()) for r in records]


def histories(settings, expect_events: int = 0) -> dict[str, list]:
    """Every workflow's events from keel.events, in log order."""
    records = read_topic(
        settings.kafka_servers, settings.topic("events"), settings.partitions, expect_events
    )
    by_wf: dict[str, list] = {}
    for env in decode_all(records):
        by_wf.setdefault(env.workflow_id, []).append(env)
    return by_wf


def assert_sound_history(wf: str, events: list) -> None:
    """Contiguous seq from 1, no duplicate event, exactly one terminal event, last."""
    from orchestrator.domain.messages import TERMINAL_EVENTS

    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(events) + 1)), f"{wf}: seqs {seqs}"
    ids = [e.message_id for e in events]
    assert len(set(ids)) == len(ids), f"{wf}: duplicate events"
    terminal = [e for e in events if isinstance(e.payload, TERMINAL_EVENTS)]
    assert len(terminal) == 1, f"{wf}: {len(terminal)} terminal events"
    assert events[-1] is terminal[0], f"{wf}: events after the terminal one"


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
