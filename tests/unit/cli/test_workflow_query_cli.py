"""``keel workflow query ID NAME [--args JSON] [--json]``: what it prints, what it refuses
before any server is asked (the answers themselves: tests/integration/test_queries.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import workflow
from orchestrator.client.query_answers import QueryAnswer
from tests.unit.cli.test_cli_usage import keel


class FakeClient:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str, Any]] = []

    def query(self, workflow_id: str, name: str, args: Any = None) -> QueryAnswer:
        self.asked.append((workflow_id, name, args))
        return QueryAnswer(workflow_id, "r1", "waiting", "approval", 5, {"line": "b"})


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(workflow, "_client", lambda app: client)
    return client


def test_it_prints_the_answer_as_one_line_of_json(fake: FakeClient) -> None:
    out = CliRunner().invoke(
        workflow.workflow_app, ["query", "o-1", "line", "--args", '{"index": 1}']
    )
    assert out.exit_code == 0, out.output
    assert out.output == '{"line": "b"}\n'
    assert fake.asked == [("o-1", "line", {"index": 1})]


def test_json_prints_the_run_the_answer_was_read_from(fake: FakeClient) -> None:
    out = CliRunner().invoke(workflow.workflow_app, ["query", "o-1", "progress", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {
        "workflow_id": "o-1",
        "run_id": "r1",
        "status": "waiting",
        "state": "approval",
        "seq": 5,
        "value": {"line": "b"},
    }
    assert fake.asked == [("o-1", "progress", None)]


def test_a_missing_name_is_a_usage_error() -> None:
    result = keel("workflow", "query", "only-id")
    assert result.returncode == 2, result.stderr
    assert "Usage: keel workflow query" in result.stderr and "Missing argument" in result.stderr


def test_bad_args_are_one_line_before_any_server_is_asked() -> None:
    result = keel("workflow", "query", "o-1", "progress", "--args", "{bad")
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (
        "error: --args is not valid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2"
    )
    assert result.stdout == ""
