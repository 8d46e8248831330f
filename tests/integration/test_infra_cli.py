"""`keel infra up/status/down` through the real CLI: no-op second up, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from tests.conftest import KEEL_DIR

pytestmark = pytest.mark.integration


def keel(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        KEEL_HOME=str(tmp_path / "home"),
        KEEL_KAFKA_LIBS=str(KEEL_DIR / "kafka-libs"),
        KEEL_KAFKA_PORT="47092",
        KEEL_REDIS_PORT="46380",
        KEEL_KAFKA_HEAP="512m",
    )
    return env


def _alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def test_up_status_down_leaves_no_process(cli_env):
    first = keel("infra", "up", "--json", env=cli_env)
    try:
        assert first.returncode == 0, first.stderr
        started = json.loads(first.stdout.splitlines()[-1])
        assert started["bootstrap_servers"] == "127.0.0.1:47092"
        assert started["redis_url"] == "redis://127.0.0.1:46380/0"
        roles = sorted(p["role"] for p in started["processes"])
        assert roles == ["kafka", "redis"]
        assert all(p["healthy"] for p in started["processes"])
        pids = {p["pid"] for p in started["processes"]}
        assert all(_alive(pid) for pid in pids)

        second = keel("infra", "up", "--json", env=cli_env)
        assert second.returncode == 0, second.stderr
        again = json.loads(second.stdout.splitlines()[-1])
        assert {p["pid"] for p in again["processes"]} == pids  # a no-op: same processes

        status = keel("infra", "status", "--json", env=cli_env)
        assert status.returncode == 0
        assert {p["pid"] for p in json.loads(status.stdout)["processes"]} == pids

        topics = keel("topics", "create", env=cli_env)
        assert topics.returncode == 0, topics.stderr
        assert "keel.events" in topics.stdout and "created" in topics.stdout
        topics_again = keel("topics", "create", env=cli_env)
        assert topics_again.returncode == 0
        assert "created" not in topics_again.stdout and "exists" in topics_again.stdout
    finally:
        down = keel("infra", "down", env=cli_env)
    assert down.returncode == 0, down.stderr
    assert not any(_alive(pid) for pid in pids)
    down_again = keel("infra", "down", env=cli_env)
    assert down_again.returncode == 0
    assert "nothing was running" in down_again.stdout
    after = keel("infra", "status", "--json", env=cli_env)
    assert after.returncode == 3
    assert json.loads(after.stdout)["processes"] == []
