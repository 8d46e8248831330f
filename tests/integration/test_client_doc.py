"""docs/client.md runs as written: each Python example, in a fresh interpreter, against a
real orchestrator and worker (the page's promise to a new user)."""

from __future__ import annotations

from pathlib import Path

from tests.doc_blocks import snippets
from tests.support import run_doc_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def test_every_example_of_the_client_page_runs(settings, services) -> None:
    services.start("orchestrator")
    services.start("worker")
    examples = [s.code for s in snippets(PAGE) if s.is_python]
    assert len(examples) == 4
    outputs = []
    for code in examples:
        outputs.append(run_doc_block(settings, code))
    started, ended = outputs[1]
    workflow_id, run_id, existed = started.split()
    assert (workflow_id, len(run_id), existed) == ("order-42", 32, "False")
    assert ended == "completed {'result': 19}"  # what the page shows
    status, state, events = outputs[2][0].split()
    # show() is a snapshot while review-7 goes on: its first review (one document: more
    # needed) may have come back already, and the signal sends it to review again
    assert (status, state) in {("running", "review"), ("waiting", "needs_documents")}
    assert int(events) >= 3  # started, entered review, scheduled the review
    assert outputs[3] == [
        "['contract.pdf'] True",
        "workflow 'document_review' v1 has no query 'progres' (declared: 'progress')",
    ]
