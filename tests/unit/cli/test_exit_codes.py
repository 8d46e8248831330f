"""One exit status, one meaning (``ExitCode``): the docs' table lists every code, no command
exits with a bare number, and the kinds a script branches on get their own code."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import exit_code_of, main
from orchestrator.client.client import StartResult
from orchestrator.domain.model.errors import (
    InvalidInputError,
    KeelError,
    WaitTimeoutError,
    WorkflowIdConflictError,
)
from orchestrator.runtime.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parents[3]
#: Where processes and commands end: each must name its status through ExitCode.
EXITING = [
    *sorted((ROOT / "orchestrator" / "cli").glob("*.py")),
    ROOT / "ops" / "cli" / "tool_commands.py",
    ROOT / "orchestrator" / "engine" / "orchestrator.py",
    ROOT / "handlers" / "worker.py",
]


def _documented() -> dict[int, str]:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = text[text.index("Exit status") : text.index("Anything else (a traceback) is a bug.")]
    return {
        int(code): meaning for code, meaning in re.findall(r"^\| `(\d+)` \| (.+) \|$", table, re.M)
    }


def test_the_docs_table_lists_every_code_and_no_other() -> None:
    assert sorted(_documented()) == sorted(ExitCode) == [0, 1, 2, 3, 4, 5, 6, 70, 130]


def test_the_table_says_which_commands_exit_pending_and_unhealthy() -> None:
    documented = _documented()
    assert "`human-tasks decide`" in documented[ExitCode.PENDING]
    assert "`workflow start --wait`" in documented[ExitCode.PENDING]
    assert "`infra status`" in documented[ExitCode.UNHEALTHY]
    assert "infra status" not in documented[ExitCode.NOT_COMPLETED]


@pytest.mark.parametrize("path", EXITING, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_command_exits_with_a_bare_number(path: Path) -> None:
    bare = [
        f"{path.name}:{node.lineno}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", ""))
        in {"Exit", "exit", "_exit", "SystemExit"}
        and any(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in node.args)
    ]
    assert bare == []


def test_each_kind_of_failure_has_its_code() -> None:
    conflict = WorkflowIdConflictError("wf", "r1", "a", 1, "running", 0, "input", "a")
    assert exit_code_of(conflict) is ExitCode.ID_CONFLICT
    assert exit_code_of(WaitTimeoutError("late")) is ExitCode.PENDING
    assert exit_code_of(InvalidInputError("bad")) is ExitCode.FAILED
    assert exit_code_of(KeelError("no")) is ExitCode.FAILED
    assert exit_code_of(ValueError("a bug")) is None


class _LateClient:
    """A client whose run is confirmed but never ends within the wait."""

    def start(self, name: str, input: Any, workflow_id: Any, version: Any, **_: Any) -> StartResult:
        return StartResult("slow-1", "r" * 32, existed=False)

    def wait(self, workflow_id: str, timeout_s: float, **_: Any) -> Any:
        raise WaitTimeoutError(
            f"workflow '{workflow_id}' did not finish within {timeout_s:g}s (status: running)"
        )


def test_start_wait_on_a_timeout_exits_pending_with_one_line(monkeypatch, capsys) -> None:
    from orchestrator.cli import workflow

    monkeypatch.setattr(workflow, "_client", lambda _app: _LateClient())
    with pytest.raises(SystemExit) as exited:
        main(["workflow", "start", "slow", "--wait", "--timeout", "0.5"])
    assert exited.value.code == ExitCode.PENDING == 5
    out, err = capsys.readouterr()
    assert out == f"started: slow-1 (run {'r' * 32})\n"
    assert err == "error: workflow 'slow-1' did not finish within 0.5s (status: running)\n"
