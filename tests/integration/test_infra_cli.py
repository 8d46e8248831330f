"""`keel infra up/status/down` through the real CLI: no-op second up, only the dead process
is restarted, private data directories, a three-broker cluster, nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import KEEL_DIR


def keel(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# Ports below Linux's ephemeral range (32768-60999): a broker restarted on a port in that
# range can find it taken by some client's outgoing connection and fail to bind.
@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        KEEL_HOME=str(tmp_path / "home"),
        KEEL_KAFKA_LIBS=str(KEEL_DIR / "kafka-libs"),
        KEEL_KAFKA_PORT="27092",
        KEEL_REDIS_PORT="26380",
        KEEL_KAFKA_HEAP="512m",
    )
    return env


def _alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    psutil.Process(pid).wait(timeout=30)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _pids(result: subprocess.CompletedProcess) -> dict[str, int]:
    """role-or-node -> pid from an ``--json`` answer of ``up`` or ``status``."""
    processes = json.loads(result.stdout.splitlines()[-1])["processes"]
    return {f"{p['role']}-{p['node_id'] or ''}": p["pid"] for p in processes}


def test_up_status_down_leaves_no_process(cli_env):
    first = keel("infra", "up", "--json", env=cli_env)
    try:
        assert first.returncode == 0, first.stderr
        started = json.loads(first.stdout.splitlines()[-1])
        assert started["bootstrap_servers"] == "127.0.0.1:27092"
        assert started["redis_url"] == "redis://127.0.0.1:26380/0"
        roles = sorted(p["role"] for p in started["processes"])
        assert roles == ["kafka", "redis"]
        assert all(p["healthy"] for p in started["processes"])
        pids = {p["pid"] for p in started["processes"]}
        assert all(_alive(pid) for pid in pids)

        second = keel("infra", "up", "--json", env=cli_env)
        assert second.returncode == 0, second.stderr
        again = json.loads(second.stdout.splitlines()[-1])
        assert {p["pid"] for p in again["processes"]} == pids  # a no-op: same processes

        # Bring back a dead Redis: the healthy broker is left alone.
        before = _pids(second)
        _kill(before["redis-"])
        third = keel("infra", "up", "--json", env=cli_env)
        assert third.returncode == 0, third.stderr
        after_restart = _pids(third)
        assert after_restart["kafka-1"] == before["kafka-1"]
        assert after_restart["redis-"] != before["redis-"]
        assert all(p["healthy"] for p in json.loads(third.stdout.splitlines()[-1])["processes"])
        pids = set(after_restart.values())

        home = Path(cli_env["KEEL_HOME"])
        for private in (home, home / "kafka", home / "kafka" / "node-1", home / "redis"):
            assert _mode(private) == 0o700, f"{private} is {oct(_mode(private))}"

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
    assert after.returncode == 6  # ExitCode.UNHEALTHY
    assert json.loads(after.stdout)["processes"] == []


def test_three_broker_cluster_restart_one_broker_and_down(cli_env):
    from confluent_kafka.admin import AdminClient, ConfigResource

    env = {**cli_env, "KEEL_KAFKA_PORT": "27192", "KEEL_REDIS_PORT": "26390"}
    servers = "127.0.0.1:27192,127.0.0.1:27194,127.0.0.1:27196"
    home = Path(env["KEEL_HOME"])
    first = keel("infra", "up", "--brokers", "3", "--json", env=env)
    pids: set[int] = set()
    try:
        assert first.returncode == 0, first.stderr
        started = _pids(first)
        pids = set(started.values())
        assert json.loads(first.stdout.splitlines()[-1])["bootstrap_servers"] == servers
        shown = keel("infra", "status", env=env)
        assert f"KEEL_BOOTSTRAP_SERVERS={servers}" in shown.stdout

        _kill(started["kafka-2"])
        again = keel("infra", "up", "--brokers", "3", "--json", env=env)
        assert again.returncode == 0, again.stderr
        restarted = _pids(again)
        pids |= set(restarted.values())
        assert restarted["kafka-2"] != started["kafka-2"]
        assert {k: v for k, v in restarted.items() if k != "kafka-2"} == {
            k: v for k, v in started.items() if k != "kafka-2"
        }

        created = keel("topics", "create", env={**env, "KEEL_PARTITIONS": "3"}, timeout=120)
        assert created.returncode == 0, created.stderr
        admin = AdminClient({"bootstrap.servers": servers})
        meta = admin.list_topics(timeout=30)
        for kind in ("commands", "events", "snapshots", "activity-tasks", "dlq", "sagas"):
            topic = meta.topics[f"keel.{kind}"]
            assert {len(p.replicas) for p in topic.partitions.values()} == {3}, kind
        for name in ("keel.events", "keel.sagas"):
            resource = ConfigResource(ConfigResource.Type.TOPIC, name)
            configs = admin.describe_configs([resource])[resource].result(30)
            assert configs["min.insync.replicas"].value == "2", name
            assert not configs["min.insync.replicas"].is_default, name  # set on the topic
    finally:
        down = keel("infra", "down", env=env, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not any(_alive(pid) for pid in pids)
    # Every broker stopped on SIGTERM (a clean shutdown), none was left to SIGKILL after
    # waiting for a controller quorum that had already gone.
    for node in (1, 2, 3):
        assert (home / "kafka" / f"node-{node}" / "data" / ".kafka_cleanshutdown").exists(), node
