"""Start-up cost of ``keel``: each command loads what it runs and not the other commands' code.

An orchestrator restarted after a crash must decide again within seconds
(git show 6f66b40:docs/performance.md, "Recovery"); the modules it imports before it subscribes are
part of that time. Each check runs in a fresh interpreter, through the real entry
point, with no servers: the service class is replaced by a probe that reports
``sys.modules`` at the moment the command would construct it, and exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

#: Code no service command runs: the client and its helpers, the operator tools, the
#: local-stack tooling, the connector (and aiohttp, which only the connector and an
#: application's own activities use), and rich, which only prints tables and errors.
NOT_FOR_SERVICES = (
    "aiohttp",
    "confluent_kafka.admin",
    "connectors",
    "ops.local",
    "orchestrator.domain.history.replay",
    "orchestrator.client.client",
    "orchestrator.client.history_io",
    "orchestrator.client.migration_requests",
    "orchestrator.client.human_task_decisions",
    "rich",
)

#: What the command table needs is typer: no settings, no domain, no Kafka, Redis or
#: OpenTelemetry (``keel --help`` then loads rich itself, to render the help).
NOT_FOR_THE_COMMAND_TABLE = (
    "confluent_kafka",
    "opentelemetry",
    "orchestrator.domain",
    "orchestrator.config.settings",
    "pydantic_settings",
    "redis",
    "rich",
)

PROBE = """
import importlib, json, sys
module, name, argv = sys.argv[1], sys.argv[2], sys.argv[3:]

class Probe:
    def __init__(self, *args, **kwargs):
        print(json.dumps(sorted(sys.modules)))
        raise SystemExit(0)

# The command imports this module first thing anyway: loading it here adds nothing.
setattr(importlib.import_module(module), name, Probe)
from orchestrator.cli import main
main(argv)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEL_", "OTEL_"))}
    # Nothing listens here: a command that reached a server would fail loudly.
    env.update(
        KEEL_BOOTSTRAP_SERVERS="127.0.0.1:1",
        KEEL_REDIS_URL="redis://127.0.0.1:1/0",
        KEEL_HOME=str(tmp_path),
        PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path), env.get("PYTHONPATH", "")]),
    )
    return env


def _modules_at_construction(tmp_path: Path, module: str, name: str, *argv: str) -> set[str]:
    (tmp_path / "probe_app.py").write_text(
        "from orchestrator.application.app import KeelApp\napp = KeelApp('probe')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module, name, *argv, "--app", "probe_app:app"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    ("command", "module", "name"),
    [
        ("orchestrator", "orchestrator.engine.orchestrator", "Orchestrator"),
        ("worker", "handlers.worker", "Worker"),
        ("projector", "orchestrator.projector.projector", "Projector"),
    ],
)
def test_a_service_command_loads_no_other_commands_code(
    tmp_path: Path, command: str, module: str, name: str
) -> None:
    loaded = _modules_at_construction(tmp_path, module, name, command)
    assert module in loaded  # the probe did stand in for the service
    assert sorted(m for m in NOT_FOR_SERVICES if m in loaded) == []


def test_the_command_table_loads_no_runtime() -> None:
    code = "import json, sys, orchestrator.cli; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(done.stdout))
    heavy = [m for m in loaded if m.startswith(NOT_FOR_THE_COMMAND_TABLE)]
    assert sorted(heavy) == []


def test_the_help_still_lists_every_command() -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    done = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert done.exit_code == 0
    listed = {line.split()[1] for line in done.output.splitlines() if line.startswith("│ ")}
    assert {
        "replay-check", "orchestrator", "worker", "projector", "sagas", "connector", "dev",
        "bench", "demo", "infra", "topics", "workflow", "projections", "dlq", "human-tasks",
        "schemas",
    } <= listed  # fmt: skip
