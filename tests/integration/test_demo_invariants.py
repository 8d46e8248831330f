"""The demo's invariant checker on crafted histories: each broken invariant fails the demo.

Pure (no broker): histories are built from real envelope and event classes, the ledger
book is the dict its ``GET /ledger`` returns.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from ops.demo_checks import Expectation, Kind, check
from ops.demo_job import plan
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    ActivityTimedOut,
    Envelope,
    StateEntered,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
)

CHECKS_OUT = {"result": 7}
KEY = "invoice-0000/post_to_ledger/1"


def history(wf: str, *payloads: Any, seqs: list[int] | None = None) -> list[Envelope[Any]]:
    seqs = seqs or list(range(1, len(payloads) + 1))
    return [
        Envelope(f"{wf}-{i}", wf, "run", seq, type(p).__name__, 1000 + seq, p)
        for i, (seq, p) in enumerate(zip(seqs, payloads, strict=True))
    ]


def started(name: str) -> WorkflowStarted:
    return WorkflowStarted(name, 1, "digest", "{}")


def checks_run(wf: str = "checks-0000", **kw: Any) -> list[Envelope[Any]]:
    return history(
        wf,
        started("parallel_checks"),
        StateEntered("run", 1),
        WorkflowCompleted(json.dumps(CHECKS_OUT)),
        **kw,
    )


def invoice_run(posting_id: str = "p-000001") -> list[Envelope[Any]]:
    """A posting whose response was lost: unknown, then the status query found it."""
    write = ActivityScheduled("run#1/post", "post_to_ledger", "post", "{}", 1, 1, KEY)
    query = ActivityScheduled(
        "run#1/post/query/1", "ledger_posting_status", "post", "{}", 1, 1, "q"
    )
    found = {"found": True, "result": {"posting_id": posting_id, "key": KEY}}
    return history(
        "invoice-0000",
        started("invoice_posting"),
        write,
        ActivityFailed("run#1/post", 1, "unknown", "OutcomeUnknownError", "connection lost"),
        query,
        ActivityCompleted("run#1/post/query/1", 1, json.dumps(found)),
        ActivityCompleted("run#1/post", 1, json.dumps({"posting_id": posting_id, "key": KEY})),
        WorkflowCompleted(json.dumps({"posting_id": posting_id})),
    )


def book(effects: int = 1) -> dict[str, Any]:
    return {
        "postings": [{"key": KEY, "posting_id": "p-000001"}],
        "effects": {KEY: effects},
        "total_effects": effects,
    }


EXPECTED = {
    "checks-0000": Expectation(Kind.CHECKS, CHECKS_OUT),
    "invoice-0000": Expectation(Kind.INVOICE),
}


def test_a_sound_batch_passes_and_counts_the_reconciled_unknown_outcome():
    found = check({"checks-0000": checks_run(), "invoice-0000": invoice_run()}, EXPECTED, book())
    assert found.violations == []
    assert found.exit_code == 0
    assert found.outcomes == {
        ("parallel_checks", "completed"): 1,
        ("invoice_posting", "completed"): 1,
    }
    assert (found.unknown_outcomes, found.reconciled_by_query, found.retries) == (1, 1, 0)
    assert (found.postings, found.duplicate_effects) == (1, 0)
    assert found.reconciled_runs == ["invoice-0000"]


def test_a_timeout_before_the_lost_answer_counts_once_and_is_reconciled():
    """Seen after an orchestrator restart: the start-to-close timer fires before the
    worker's report of the lost answer arrives; the query follows the timeout."""
    write = ActivityScheduled("run#1/post", "post_to_ledger", "post", "{}", 1, 1, KEY)
    query = ActivityScheduled(
        "run#1/post/query/1", "ledger_posting_status", "post", "{}", 1, 1, "q"
    )
    found = {"found": True, "result": {"posting_id": "p-000001", "key": KEY}}
    events = history(
        "invoice-0000",
        started("invoice_posting"),
        write,
        ActivityTimedOut("run#1/post", 1, "start_to_close"),
        query,
        ActivityFailed("run#1/post", 1, "unknown", "OutcomeUnknownError", "connection lost"),
        ActivityCompleted("run#1/post/query/1", 1, json.dumps(found)),
        ActivityCompleted("run#1/post", 1, json.dumps({"posting_id": "p-000001", "key": KEY})),
        WorkflowCompleted(json.dumps({"posting_id": "p-000001"})),
    )
    found_ = check({"checks-0000": checks_run(), "invoice-0000": events}, EXPECTED, book())
    assert found_.violations == []
    assert (found_.unknown_outcomes, found_.reconciled_by_query, found_.timeouts) == (1, 1, 1)
    assert found_.reconciled_runs == ["invoice-0000"]


def test_a_duplicate_effect_in_the_ledger_fails_the_demo():
    found = check({"checks-0000": checks_run(), "invoice-0000": invoice_run()}, EXPECTED, book(2))
    assert found.duplicate_effects == 1
    assert found.exit_code == 1
    assert found.violations == [f"1 duplicate effect(s) in the ledger: ['{KEY}']"]


def test_a_history_with_a_gap_fails_the_demo():
    gappy = checks_run(seqs=[1, 2, 4])
    found = check({"checks-0000": gappy, "invoice-0000": invoice_run()}, EXPECTED, book())
    assert found.exit_code == 1
    assert found.violations == ["checks-0000: history seq is not contiguous from 1: [1, 2, 4]"]
    assert len(found.unsound_histories) == 1


def test_a_run_that_never_ends_fails_the_demo():
    running = checks_run()[:2]
    found = check({"checks-0000": running, "invoice-0000": invoice_run()}, EXPECTED, book())
    assert found.not_terminal == ["checks-0000"]
    assert found.violations == ["checks-0000: not terminal (last event StateEntered)"]
    assert found.exit_code == 1


def test_two_terminal_events_and_a_missing_run_fail_the_demo():
    twice = history(
        "checks-0000",
        started("parallel_checks"),
        WorkflowFailed("boom"),
        WorkflowCompleted(json.dumps(CHECKS_OUT)),
    )
    found = check({"checks-0000": twice}, EXPECTED, {"postings": [], "effects": {}})
    assert found.violations == [
        "checks-0000: 2 terminal events",
        "invoice-0000: no events; the run never started",
    ]


def test_a_wrong_output_or_a_posting_no_run_owns_fails_the_demo():
    wrong = history("checks-0000", started("parallel_checks"), WorkflowCompleted('{"result": 8}'))
    stray = book()
    stray["effects"]["someone-else/post_to_ledger/1"] = 1
    found = check({"checks-0000": wrong, "invoice-0000": invoice_run()}, EXPECTED, stray)
    assert found.violations == [
        "checks-0000: output {'result': 8}, expected {'result': 7}",
        "ledger postings no run accounts for: ['someone-else/post_to_ledger/1']",
    ]
    mismatch = check(
        {"checks-0000": checks_run(), "invoice-0000": invoice_run("p-999999")}, EXPECTED, book()
    )
    assert mismatch.violations == [
        "invoice-0000: output {'posting_id': 'p-999999'} does not match the ledger's postings "
        "['p-000001']"
    ]


def test_the_plan_mixes_the_three_workflows_with_known_outcomes():
    runs = plan(9)
    assert [r.workflow_id for r in runs[:3]] == ["checks-0000", "review-0000", "invoice-0000"]
    reviews = [r for r in runs if r.kind is Kind.REVIEW]
    assert [len(r.documents) for r in reviews] == [2, 2, 0]
    assert [r.expect.output for r in reviews] == [
        {"decision": "approved", "documents": 3},
        {"decision": "rejected", "documents": 3},
        {"decision": "rejected", "documents": 1},
    ]


@pytest.mark.parametrize("size", ["2", "abc"])
def test_keel_demo_refuses_a_bad_size_before_starting_anything(size):
    from typer.testing import CliRunner

    from orchestrator.cli import app

    done = CliRunner().invoke(app, ["demo", "--size", size])
    assert done.exit_code == 2
    assert "--size" in done.output
    assert "keel demo:" not in done.output


def test_no_product_module_imports_the_examples():
    code = (
        "import sys, orchestrator, orchestrator.cli, handlers.worker, "
        "connectors; assert 'orchestrator.examples' not in sys.modules, 'examples imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
