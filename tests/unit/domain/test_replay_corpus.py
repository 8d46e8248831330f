"""The recorded corpus (tests/histories) replays identically with this code, and an
in-place edit of a guard on a copy of a definition is caught, naming the first event.

Runs ``keel replay-check`` as a process, the way CI does; no servers are needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.examples import app as examples

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "histories"

EDITED_APP = """
import dataclasses

from orchestrator.application.app import KeelApp
from orchestrator.domain.authoring.definitions import Transition, WorkflowDefinition
from orchestrator.examples import app as examples, document_review

app = KeelApp("edited-in-place")
app.handlers.update(examples.handlers)
for definition in examples.definitions.values():
    if definition.name != "document_review":
        app.workflow(definition)
states = list(document_review.states.values())
# the edit: approve with one document (was: when the reviewer said "approved")
guard = Transition("approved", when=lambda ctx: ctx.results["review"]["documents"] >= 1)
states[0] = dataclasses.replace(states[0], transitions=(guard, *states[0].transitions[1:]))
app.workflow(
    WorkflowDefinition(
        "document_review", 1, document_review.input_model, states,
        output_model=document_review.output_model,
    )
)
"""


def replay_check(*args: str, pythonpath: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "replay-check", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
        check=False,
    )


def test_the_corpus_replays_identically() -> None:
    done = replay_check("--histories", str(CORPUS), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["diverged"] == 0 and report["digest_changed"] == 0
    runs = report["reports"]
    assert all(r["ok"] and r["folded_only"] == 0 for r in runs)
    # every example workflow has recorded runs, and so has the built-in keel.schedule
    examples_and_schedules = {name for name, _ in examples.definitions} | {"keel.schedule"}
    assert {r["name"] for r in runs} == examples_and_schedules
    table = replay_check("--histories", str(CORPUS))
    assert table.returncode == 0
    assert f"identical: {len(runs)}/{len(runs)} runs from" in table.stdout


def test_an_in_place_guard_edit_fails_the_check_at_the_first_changed_decision(
    tmp_path: Path,
) -> None:
    (tmp_path / "edited_app.py").write_text(EDITED_APP)
    done = replay_check(
        "--app",
        "edited_app:app",
        "--histories",
        str(CORPUS),
        "--json",
        pythonpath=str(tmp_path),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    runs = {r["workflow_id"]: r for r in report["reports"]}
    approved = runs["review-approved"]
    assert approved["digest_changed"] is True
    assert approved["recorded_digest"] != approved["current_digest"]
    d = approved["divergence"]
    assert d["seq"] == 5 and d["command"] == "CompleteActivity"
    assert d["expected"] == {"type": "StateEntered", "state": "needs_documents", "visit": 1}
    assert d["got"] == {"type": "StateEntered", "state": "approved", "visit": 1}
    # other workflows are untouched
    assert all(r["ok"] for r in report["reports"] if r["name"] != "document_review")
    table = replay_check(
        "--app", "edited_app:app", "--histories", str(CORPUS), pythonpath=str(tmp_path)
    )
    assert table.returncode == 1
    assert "diverged: review-approved (document_review v1) at seq 5 deciding CompleteActivity" in (
        table.stdout
    )
    assert "edited in place: review-approved (document_review v1)" in table.stdout


def test_replay_check_wants_one_source() -> None:
    done = replay_check()
    assert done.returncode == 1
    assert done.stderr.strip() == "error: give exactly one of --from-topic and --histories DIR"
    missing = replay_check("--histories", "no/such/dir")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: no/such/dir is not a directory of histories"


def _recorded(scenario: str) -> list[dict]:
    text = (CORPUS / f"{scenario}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_the_corpus_keeps_throttled_attempts_and_a_terminated_run() -> None:
    """What replay-check must go on covering (issue 33): attempts a per-type limit
    throttled, redispatched without spending a retry, and a terminate."""
    throttled = [
        e["payload"]
        for e in _recorded("throttled")
        if e["type"] == "ActivityFailed" and e["payload"]["failure_class"] == "throttled"
    ]
    assert throttled and all(p["retry_after_ms"] > 0 for p in throttled)
    ends = [e["type"] for e in _recorded("terminate") if e["type"].startswith("Workflow")]
    assert ends == ["WorkflowStarted", "WorkflowTerminated"]
