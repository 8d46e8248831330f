"""The dev tools' commands reach ``keel`` through the ``keel.tools`` entry point, and
``keel infra status`` tells a stopped service from a healthy one (docs/local-infra.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.runtime.exit_codes import ExitCode


def _status_file(home: Path, name: str, **fields: object) -> None:
    (home / "status").mkdir(exist_ok=True)
    data = {"state": "running", "pid": os.getpid(), "updated_at": time.time(), **fields}
    (home / "status" / f"{name}.json").write_text(json.dumps(data))


def test_the_tools_commands_come_from_their_entry_point() -> None:
    from importlib.metadata import entry_points

    tools = {e.name: e.value for e in entry_points(group="keel.tools")}
    assert tools == {"ops": "ops.cli.tool_commands:register"}
    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert {"infra", "dev", "bench", "demo", "evaluate"} <= names


def test_a_stopped_worker_is_gone_and_each_service_shows_its_prefix(tmp_path: Path) -> None:
    _status_file(tmp_path, "orchestrator-a", topic_prefix="shop", assigned_partitions=[0, 1])
    _status_file(tmp_path, "worker-b", topic_prefix="shop", state="stopped")
    done = CliRunner().invoke(
        app, ["infra", "status"], env={"KEEL_HOME": str(tmp_path), "COLUMNS": "200"}
    )
    rows = {line.split()[1]: line for line in done.output.splitlines() if line.startswith("│ ")}
    assert "gone (last report" in rows["worker-b"]
    assert "ok" not in rows["worker-b"].split("│")[-2]
    assert rows["orchestrator-a"].split("│")[-2].strip() == "ok"
    assert [c.strip() for c in rows["worker-b"].split("│")[2:3]] == ["shop"]
    assert done.exit_code == ExitCode.UNHEALTHY == 6  # no local stack runs here


def test_the_product_imports_no_tool() -> None:
    code = "import sys, orchestrator.cli; print(sorted(m for m in sys.modules if m == 'ops' or m.startswith('ops.')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the entry point loads the tools' commands module, and only it: the stack, the bench
    # and the demo load when their command runs
    assert done.stdout.strip() == "['ops', 'ops.cli', 'ops.cli.tool_commands']"


def test_keel_dev_makes_one_demo_approver_and_keeps_its_token(tmp_path) -> None:
    import hashlib
    import json
    import stat

    from connectors.auth import Actors
    from ops.cli.tool_commands import DEV_ACTOR, dev_actor

    actors_path, token = dev_actor(tmp_path)
    again_path, again = dev_actor(tmp_path)
    assert (again_path, again) == (actors_path, token) and len(token) == 48
    token_file = tmp_path / "dev" / f"{DEV_ACTOR}.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    stored = json.loads(actors_path.read_text())
    assert token not in actors_path.read_text()
    assert stored[DEV_ACTOR]["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    actor = Actors.load(actors_path).authenticate(f"Bearer {token}")
    assert actor is not None and "keel-operator" in actor.roles
