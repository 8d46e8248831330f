"""A Redis outage pauses effect claims: no attempt spent, no dead letter, no duplicate.

The worker talks to a redis-server of its own (a free port, started and stopped by PID
here); the orchestrator and the read model use the session's Redis, which is never
touched. The ledger's own books are the proof of "exactly one posting per key".
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

from orchestrator.domain.model.messages import (
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
)
from tests.support import assert_sound_history, histories, read_topic, wait_until

OUTAGE_S = 10


class OwnRedis:
    """A redis-server on a free port with an append-only file, so a restart keeps data."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [
            "redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self.dir), "--save", "", "--appendonly", "yes",
            "--appendfsync", "always",
        ]  # fmt: skip
        log = (self.dir / "redis.log").open("ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        wait_until(lambda: _pings(client), 20, f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # by PID; a clean shutdown flushes the append-only file
            self.proc.wait(timeout=20)
        self.proc = None


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(tmp_path / "own-redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def invoice(i: int) -> dict:
    return {"invoice_id": f"I{i}", "account": "A", "amount": i}


def test_a_redis_outage_costs_no_attempt_no_dead_letter_and_no_duplicate(
    settings, services, client, ledger_url, ledger, own_redis
):
    ledger.set_faults(dedupe=False)  # a second POST of one key would be a second posting
    services.env["KEEL_LEDGER_URL"] = ledger_url
    services.start("orchestrator")
    worker = services.start("worker", KEEL_REDIS_URL=own_redis.url)
    warm = client.start("invoice_posting", invoice(0), "warm").workflow_id
    assert client.wait(warm, 60).status == "completed"

    n = 60
    client.start_many("invoice_posting", [(f"post-{i}", invoice(i)) for i in range(1, n // 2)])
    wait_until(lambda: len(ledger.ledger()["calls"]) > 5, 60, "postings to flow")
    own_redis.stop()
    outage_began = time.monotonic()
    client.start_many("invoice_posting", [(f"post-{i}", invoice(i)) for i in range(n // 2, n)])
    # Mid-outage, stop the worker: it must not wait for Redis forever.
    time.sleep(OUTAGE_S / 2)
    services.kill(worker, 15)
    assert worker.returncode == 0, worker.log_path.read_text()[-2000:]
    worker = services.start("worker", KEEL_REDIS_URL=own_redis.url)
    # The new worker must meet the outage too (its redelivered tasks wait at the gate),
    # however slowly it starts on a loaded machine; only then does Redis come back.
    wait_until(
        lambda: "effect claims paused" in worker.log_path.read_text(),
        120,
        "the new worker to pause",
    )
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_began)))
    own_redis.start()

    wait_until(lambda: client.projection.counts()["completed"] == n, 180, f"{n} completions")
    assert worker.poll() is None, "the worker is alive"
    book = ledger.ledger()
    keys = {f"post-{i}/post_to_ledger/1" for i in range(1, n)} | {"warm/post_to_ledger/1"}
    assert set(book["effects"]) == keys
    assert set(book["effects"].values()) == {1}, "exactly one posting per key"
    assert book["total_effects"] == n

    dlq = read_topic(settings.kafka_servers, settings.topic("dlq"), settings.partitions, max_s=2)
    assert dlq == [], "no dead letter"
    by_wf = histories(settings)
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)
        assert not any(isinstance(e.payload, ActivityDeadLettered) for e in events)
        posts = [e.payload for e in events if isinstance(e.payload, ActivityScheduled)
                 and e.payload.activity_type == "post_to_ledger"]  # fmt: skip
        assert [p.attempt for p in posts] == [1], f"{wf}: the outage spent no attempt"
        failures = [e.payload for e in events if isinstance(e.payload, ActivityFailed)]
        assert not [f for f in failures if "Redis" in f.message or "Connection" in f.error_type]

    logs = [p.log_path.read_text() for p in services.procs[1:]]
    # The gate's own line; a worker stopped mid-outage may also say that an effect was
    # not recorded (stopping, Redis unreachable), which is a different fact.
    pause_line = "effect claims paused"
    paused = sum(log.count(pause_line) for log in logs)
    resumed = sum(log.count("Redis reachable again") for log in logs)
    assert paused >= 1, "the outage reached the worker's effect claims"
    assert resumed == 1, "one line when Redis came back, however many tasks waited"
    assert all(log.count(pause_line) <= 1 for log in logs), "one line per outage"
