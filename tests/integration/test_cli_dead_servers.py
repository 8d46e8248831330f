"""Every ``keel`` command with Kafka and Redis unreachable: one line, a non-zero exit, no
traceback and no password (docs/configuration.md, "Exit status").

The commands come from the CLI itself, so a new command without an entry here fails the
first test: it must be tried against dead servers too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.main import get_command

from orchestrator.cli import app

KAFKA_PASSWORD = "k4fka-pw-never-shown"
REDIS_PASSWORD = "r3dis-pw-never-shown"

#: Each command that ends on its own, with arguments that get it past its usage checks.
ONE_SHOT: dict[str, list[str]] = {
    "replay-check": ["--from-topic"],
    "topics create": [],
    "workflow migrate": ["--name", "parallel_checks", "--from-version", "1", "--to-version", "2"],
    "workflow verify": ["--all"],
    "workflow start": ["parallel_checks", "--input", '{"n": 1}'],
    "workflow show": ["wf-1"],
    "workflow list": [],
    "workflow query": ["wf-1", "progress"],
    "workflow signal": ["wf-1", "documents_added"],
    "workflow signal-with-start": [
        "wf-1",
        "documents_added",
        "--workflow",
        "document_review",
        "--input",
        '{"document": "passport"}',
    ],
    "workflow cancel": ["wf-1"],
    "workflow terminate": ["wf-1"],
    "workflow resolve": ["wf-1", "a1", "--reason", "checked by hand"],
    "workflow export": ["wf-1"],
    "projections rebuild": [],
    "projections status": [],
    "dlq list": [],
    "workers": [],
    "dlq redrive": ["letter-1"],
    "dlq discard": ["letter-1", "--reason", "seen"],
    "human-tasks list": [],
    "human-tasks show": ["task-1"],
    "human-tasks decide": ["task-1", "--reject", "--actor", "alice"],
    "schedules create": ["nightly", "--workflow", "parallel_checks", "--every", "1h"],
    "schedules list": [],
    "schedules show": ["nightly"],
    "schedules pause": ["nightly"],
    "schedules resume": ["nightly"],
    "schedules delete": ["nightly"],
    "dev": [],
    "bench": ["--light-only", "--runs", "1"],
    "demo": [],
    "evaluate": ["--runs", "3", "--faults", "crash"],
    "invoices submit": ["ops/demo_data/invoices/inv-2026-0001-auto.txt"],
}
#: Services: they wait for their servers (a broker lost while running is survived, docs/
#: operations.md), so they are checked for quiet, redacted logs instead (below).
SERVICES = {"orchestrator", "worker", "projector", "sagas", "connector"}
#: The local stack's own commands: they manage the servers rather than use them.
STACK = {"infra up", "infra down", "infra status", "infra fetch"}
#: Commands that use no server at all (they read files and the application).
OFFLINE: dict[str, list[str]] = {"schemas export": ["--check"]}


def _leaf_commands() -> set[str]:
    def walk(cmd, path):  # type: ignore[no-untyped-def]
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path)

    return set(walk(get_command(app), []))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def dead_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        KEEL_HOME=str(tmp_path_factory.mktemp("home")),
        KEEL_BOOTSTRAP_SERVERS=f"127.0.0.1:{_closed_port()}",
        KEEL_REDIS_URL=f"redis://:{REDIS_PASSWORD}@127.0.0.1:{_closed_port()}/0",
        KEEL_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
        KEEL_KAFKA_SASL_MECHANISM="SCRAM-SHA-256",
        KEEL_KAFKA_SASL_USERNAME="keel",
        KEEL_KAFKA_SASL_PASSWORD=KAFKA_PASSWORD,
        KEEL_ADMIN_TIMEOUT_S="3",
        KEEL_TASK_TOKEN_SECRET="t" * 40,
    )
    return env


def _keel(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_every_command_is_tried_here() -> None:
    assert _leaf_commands() == set(ONE_SHOT) | SERVICES | STACK | set(OFFLINE)


@pytest.mark.parametrize("command", sorted(OFFLINE))
def test_a_command_that_needs_no_server_works_without_one(
    command: str, dead_env: dict[str, str]
) -> None:
    done = _keel(dead_env, *command.split(), *OFFLINE[command])
    assert done.returncode == 0, (done.stdout, done.stderr)


@pytest.mark.parametrize("command", sorted(ONE_SHOT))
def test_a_command_against_dead_servers_prints_one_line(
    command: str, dead_env: dict[str, str]
) -> None:
    done = _keel(dead_env, *command.split(), *ONE_SHOT[command])
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if command == "bench":  # its progress goes to stderr before the error
        lines = [line for line in lines if not line.startswith("run ")]
    assert done.returncode == 1, (done.returncode, lines)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert KAFKA_PASSWORD not in lines[0] and REDIS_PASSWORD not in lines[0]


@pytest.mark.parametrize("service", ["worker", "orchestrator"])
def test_a_service_waits_for_dead_servers_quietly_and_shows_no_password(
    service: str, dead_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "service.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", service],
            env=dead_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            time.sleep(12)
            assert proc.poll() is None, log.read_text()[-2000:]  # still waiting, not crashed
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = log.read_text()
    assert proc.returncode == 0, text[-2000:]  # a stop while it waits is a clean stop
    assert not [line for line in text.splitlines() if line.startswith("error:")], text[-2000:]
    assert KAFKA_PASSWORD not in text and REDIS_PASSWORD not in text
    assert "Traceback" not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    kafka = [x for x in lines if x["logger"] in ("keel.kafka", "keel.librdkafka")]
    # the clients' refusals repeat dozens of times a second: each kind is logged once
    # per 30 s window (docs/configuration.md)
    kinds = {x["msg"].split(":")[0] for x in kafka}
    assert 0 < len(kafka) <= 4 * len(kinds) + 4, [x["msg"][:120] for x in kafka]


def test_credentials_in_a_bootstrap_server_are_refused_and_masked(
    dead_env: dict[str, str],
) -> None:
    env = {**dead_env, "KEEL_BOOTSTRAP_SERVERS": "alice:s3cret-pw@127.0.0.1:9092"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "workflow", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: invalid setting KEEL_BOOTSTRAP_SERVERS=***@127.0.0.1:9092: Value error, "
        "'***@127.0.0.1:9092' holds credentials, which Kafka does not take in a bootstrap "
        "server: give host:port, and KEEL_KAFKA_SASL_USERNAME and KEEL_KAFKA_SASL_PASSWORD "
        "(docs/operations.md)"
    )
