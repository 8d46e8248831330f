"""Bad input to the foundation commands: one clear line, non-zero exit, bounded time."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from tests.integration.test_infra_cli import keel


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(extra)
    return env


def test_topics_create_against_a_dead_broker_fails_fast_with_one_line(tmp_path):
    env = _env(
        KEEL_BOOTSTRAP_SERVERS="127.0.0.1:1", KEEL_ADMIN_TIMEOUT_S="5", KEEL_HOME=str(tmp_path)
    )
    began = time.monotonic()
    result = keel("topics", "create", env=env, timeout=60)
    assert time.monotonic() - began < 30
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: cannot reach Kafka at 127.0.0.1:1 within 5s (Failed to get metadata: "
        "Local: Broker transport failure); is it running? try `keel infra up`"
    )
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "KEEL_PARTITIONS",
            "0",
            "error: invalid setting KEEL_PARTITIONS=0: Input should be greater than or equal to 1",
        ),
        (
            "KEEL_REPLICATION_FACTOR",
            "x",
            "error: invalid setting KEEL_REPLICATION_FACTOR=x: Input should be a valid integer, unable to parse string as an integer",
        ),
        (
            "KEEL_BOOTSTRAP_SERVERS",
            "localhost",
            "error: invalid setting KEEL_BOOTSTRAP_SERVERS=localhost: Value error, 'localhost' is not host:port",
        ),
    ],
)
def test_an_invalid_setting_is_refused_naming_it(tmp_path, variable, value, message):
    result = keel(
        "topics", "create", env=_env(KEEL_HOME=str(tmp_path), **{variable: value}), timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.strip() == message


def test_a_missing_program_is_named_with_its_install_command(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("java", "mvn"):
        (bin_dir / program).symlink_to(shutil.which(program))
    env = _env(KEEL_HOME=str(tmp_path / "home"), KEEL_KAFKA_PORT="29192", KEEL_REDIS_PORT="29480")
    env["PATH"] = str(bin_dir)
    result = keel("infra", "up", env=env, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: redis-server not found on PATH; install it with: apt-get install -y redis-server"
    )
