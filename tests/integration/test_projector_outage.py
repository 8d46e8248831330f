"""A Redis outage pauses the supervised projector; it recovers on its own.

The test runs its OWN redis-server (a free port, data in tmp_path, append-only so a
restart keeps the read model) and stops it by PID; the shared Redis is never touched.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest

from orchestrator.client.client import KeelClient
from tests.integration.test_read_model import keel
from tests.support import Services, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnRedis:
    def __init__(self, data_dir, port: int) -> None:
        self.dir, self.port, self.proc = data_dir, port, None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--appendonly", "yes", "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        wait_until(answers, 20, "the test's own redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(tmp_path, _free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_projector_rides_out_a_redis_outage(settings, tmp_path, own_redis):
    from orchestrator.config.settings import Settings
    from orchestrator.examples import app

    url = f"redis://127.0.0.1:{own_redis.port}/0"
    own = Settings(**{**settings.model_dump(), "redis_url": url})
    svc = Services(own, tmp_path)
    client = KeelClient(own, app)
    try:
        orch = svc.start("orchestrator")
        svc.start("worker")
        first = client.start("parallel_checks", {"n": 1}, "before-outage")
        assert client.wait(first.workflow_id, 60).status == "completed"

        own_redis.stop()
        # start_many reads nothing from Redis: these land in Kafka during the outage.
        client.start_many("parallel_checks", [(f"during-{i}", {"n": i}) for i in range(10)])
        # The outage lasts until the projector has failed on it three times, backing off.
        wait_until(lambda: "projector failed (restart 3 in" in orch.log_path.read_text(), 60,
                   "the projector to fail on the outage three times")  # fmt: skip
        assert orch.poll() is None, "the orchestrator process survived the outage"
        own_redis.start()
        back_at_ms = int(time.time() * 1000)

        wait_until(lambda: client.projection.counts()["completed"] == 11, 120, "11 completions")
        assert client.show("during-9").output == {"result": 10 + 18 + 81}

        def recovered() -> dict | None:
            out = keel(own, "projections", "status", "--json")
            projectors = json.loads(out.stdout)["projectors"] if out.returncode == 0 else []
            # What it published before the outage stays in Redis (a TTL) until overwritten.
            fresh = [p for p in projectors if p["updated_at"] >= back_at_ms and p["alive"]]
            return fresh[0] if fresh else None

        health = wait_until(recovered, 30, "the projector to report itself alive")
        assert health["restarts"] >= 3
        assert "ConnectionError" in health["last_error"] or "Redis" in health["last_error"]
        assert orch.poll() is None
        log = orch.log_path.read_text()
        assert "projector failed (restart 1 in" in log
    finally:
        client.close()
        svc.stop_all()
