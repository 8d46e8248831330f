"""docs/testing.md runs as written: its Python blocks, in order, in one namespace (the
page's application first), then its plugin example with an environment of that app."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from orchestrator.testing import WorkflowEnvironment
from tests.unit.test_doc_snippets import PYTHON, snippets

PAGE = Path(__file__).resolve().parents[3] / "docs" / "testing.md"


def run_page() -> dict[str, Any]:
    """The namespace the page's Python blocks leave (every block executed once)."""
    namespace: dict[str, Any] = {"__name__": "testing_page"}
    for block in snippets(PAGE):
        if block.lang in PYTHON:
            exec(compile(block.code, f"{PAGE.name}:{block.line}", "exec"), namespace)
    return namespace


def test_the_page_runs_and_its_keel_env_example_passes() -> None:
    namespace = run_page()
    tests = {n: f for n, f in namespace.items() if n.startswith("test_") and callable(f)}
    assert set(tests) == {
        "test_an_unanswered_big_order_is_rejected_after_30_days",
        "test_a_big_order_on_kafka_and_redis",  # run on the real stack: tests/integration
    }
    in_process = tests["test_an_unanswered_big_order_is_rejected_after_30_days"]
    assert list(inspect.signature(in_process).parameters) == ["keel_env"]
    with WorkflowEnvironment(namespace["app"]) as env:
        in_process(keel_env=env)
