"""Small helpers shared by integration tests (real Kafka only)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from orchestrator.domain.model.messages import ActivityTask, Envelope
from orchestrator.payload_schemas.codec import Codec


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
    from orchestrator.payload_schemas.codec import Codec

    codec = Codec()
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
    from orchestrator.domain.model.messages import TERMINAL_EVENTS

    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(events) + 1)), f"{wf}: seqs {seqs}"
    ids = [e.message_id for e in events]
    assert len(set(ids)) == len(ids), f"{wf}: duplicate events"
    terminal = [e for e in events if isinstance(e.payload, TERMINAL_EVENTS)]
    assert len(terminal) == 1, f"{wf}: {len(terminal)} terminal events"
    assert events[-1] is terminal[0], f"{wf}: events after the terminal one"


def longest_stall_s(by_wf: dict[str, list], prefix: str, since_ms: int) -> tuple[float, float]:
    """The longest time from ``since_ms`` on in which no run whose id starts with ``prefix``
    committed an event, and when that gap began (seconds after ``since_ms``).

    Read from the event store: each event's ``recorded_at`` is the orchestrator's clock at
    the decision that wrote it, so a gap is time in which nothing of those runs was decided
    and committed (a stalled orchestrator, worker, broker or Redis alike).
    """
    times = sorted(
        ev.recorded_at
        for wf, events in by_wf.items()
        if wf.startswith(prefix)
        for ev in events
        if ev.recorded_at >= since_ms
    )
    longest, began = 0, 0
    for before, after in zip([since_ms, *times], times, strict=False):
        if after - before > longest:
            longest, began = after - before, before - since_ms
    return longest / 1000, began / 1000


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


# -- talking to the worker through the real topics (tests/integration/test_worker_*.py) --


def task_envelope(
    workflow_id: str,
    activity_type: str,
    input_json: str,
    *,
    attempt: int = 1,
    activity_id: str = "run#1/step",
    message_id: str | None = None,
):
    """An ActivityTask as the orchestrator would send it (idempotency key ``wf/type/1``)."""
    return Envelope(
        message_id=message_id or f"test/{workflow_id}/{activity_type}/{attempt}",
        workflow_id=workflow_id,
        run_id="r1",
        seq=0,
        type="ActivityTask",
        recorded_at=int(time.time() * 1000),
        payload=ActivityTask(
            activity_id,
            activity_type,
            "step",
            input_json,
            1,
            attempt,
            f"{workflow_id}/{activity_type}/1",
        ),
    )


def produce(settings, topic_kind: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    """Produce raw ``(key, value)`` records to a Keel topic and wait for the broker."""
    producer = Producer(
        {"bootstrap.servers": settings.kafka_servers, "message.max.bytes": 2_000_000}
    )
    for key, value in records:
        producer.produce(settings.topic(topic_kind), key=key, value=value)
    assert producer.flush(30) == 0


def reports(settings, workflow_id: str | None = None) -> list:
    """Every command on the commands topic (decoded), optionally of one workflow."""
    codec = Codec()
    records = read_topic(
        settings.kafka_servers, settings.topic("commands"), settings.partitions, max_s=2
    )
    found = [codec.decode(r.value()) for r in records]
    return [e for e in found if workflow_id is None or e.workflow_id == workflow_id]


def run_doc_block(settings, code: str, timeout_s: float = 120) -> list[str]:
    """Run one Python block of a docs page as a user would (a fresh interpreter, on the
    test's servers and prefix); its stdout lines, after asserting it exited 0."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", code],
        env=settings.child_environment(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def run_keel(servers, home, *args: str, timeout_s: float = 400, env: dict | None = None, cwd=None):
    """``keel ARGS`` as a new user runs it: a fresh interpreter on the test's servers, with
    ``KEEL_HOME`` ``home``, 4 partitions and none of this process's other ``KEEL_*`` (but
    ``env``'s), in ``cwd`` (this process's when None); the finished process (stdout and
    stderr captured; a wide terminal for its tables)."""
    import os
    import subprocess
    import sys

    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        extra,
        KEEL_BOOTSTRAP_SERVERS=servers.bootstrap_servers,
        KEEL_REDIS_URL=servers.redis_url,
        KEEL_HOME=str(home),
        KEEL_PARTITIONS="4",
        COLUMNS="200",
    )
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
