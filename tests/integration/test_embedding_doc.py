"""docs/embedding.md runs as written: its example builds an orchestrator, a worker and a
projector in one process with ``ServiceParts`` (the composition root the ``keel`` service
commands use), on the test's broker and Redis with no ``keel`` service running, starts a run
and prints its output."""

from __future__ import annotations

from pathlib import Path

from tests.doc_blocks import snippets
from tests.support import assert_sound_history, histories, run_doc_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"


def test_the_embedding_page_runs_as_written(settings) -> None:
    code = [s.code for s in snippets(PAGE) if s.is_python and "ServiceParts.build" in s.code]
    assert len(code) == 1
    assert run_doc_block(settings, code[0]) == ["{'amount': 42}"]
    events = histories(settings)["order-1"]
    assert_sound_history("order-1", events)
    assert [e.type for e in events][-1] == "WorkflowCompleted"
