"""``keel evaluate --app --driver`` on a workflow that waits (docs/evaluation.md, "A
workflow that waits"), against the real broker and Redis: ``order_approval``
(tests/waiting_app.py) waits for a person, a signed webhook and a signal in every run,
and its driver answers each through Keel's real paths, through a crash; without a
driver the evaluation stops at the first wait, naming it."""

from __future__ import annotations

import json

from tests.integration.test_evaluate import _sound_batch
from tests.support import run_keel

ORDERS = '{"order": "A", "total": 120}\n{"order": "B", "total": 900}\n{"order": "C", "total": 80}\n'
APP = ["evaluate", "--app", "tests.waiting_app:app", "--workflow", "order_approval"]


def test_a_waiting_workflow_is_evaluated_through_a_crash_with_its_driver(servers, tmp_path):
    """Every run is approved or rejected by the driver's human-task rule (a signed
    decision with the operation's digest), paid by a webhook signed for the connector and
    delivered by a signal; each ends as its fault-free run did, through a SIGKILL of the
    orchestrator and the worker and through every start and answer sent again, with
    every history sound and every answer counted."""
    inputs = tmp_path / "orders.jsonl"
    inputs.write_text(ORDERS)
    out = tmp_path / "report"
    args = [*APP, "--inputs", str(inputs), "--runs", "3", "--faults", "crash,duplicate_callbacks"]
    args += ["--driver", "tests.waiting_app:driver", "--out", str(out)]
    done = run_keel(servers, tmp_path, *args, timeout_s=240)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert (report["verdict"], report["driver"]) == ("pass", "tests.waiting_app:driver")
    classes = {c["fault"]: c for c in report["classes"]}
    assert list(classes) == ["none", "crash", "duplicate_callbacks"]
    for c in classes.values():
        assert c["outcomes"] == {"delivered": 2, "rejected": 1}, c
        assert (c["history_violations"], c["re_executed_activities"]) == (0, 0), c
        assert c["human_tasks"] == 3 and c["driver_refusals"] == []
        # three decisions; a payment webhook and a delivery signal for each approved order
        assert c["driver_actions"] == {"human_task": 3, "signal": 2, "webhook": 2}, c
    crash = classes["crash"]
    assert crash["fault_fired"] == 1 and crash["fault_hits"] >= 1, crash["recovery"]
    assert all(r["recovered_at_node"] for r in crash["recovery"]), crash["recovery"]
    # every start sent three times (6 repeats) and every answer of the driver twice (7):
    # the repeats changed nothing (the same outcomes, answers and sound histories)
    assert classes["duplicate_callbacks"]["fault_fired"] == 6 + 7
    for c in report["classes"]:
        _sound_batch(servers, c["prefix"], 3)


def test_without_a_driver_the_evaluation_stops_at_the_first_wait_naming_it(servers, tmp_path):
    """No rule answers the approval: the fault-free batch stops there, and the error
    names the run, its state and the task (not "3 run(s) did not end" after the
    batch's timeout)."""
    inputs = tmp_path / "orders.jsonl"
    inputs.write_text(ORDERS)
    args = [*APP, "--inputs", str(inputs), "--runs", "3", "--faults", "crash"]
    done = run_keel(servers, tmp_path, *args, "--out", str(tmp_path / "r"), timeout_s=120)
    assert done.returncode == 1, done.stdout + done.stderr
    error = " ".join(done.stderr.split())
    assert "(order_approval v1) waits in state 'approval' for human task 'approve_order'" in error
    assert "and no driver answers" in error and 'driver.human_task("approve_order", ...)' in error
    assert "did not end" not in done.stdout + done.stderr


def test_the_driver_plays_the_model_for_every_run(servers, tmp_path):
    """``invoice_extraction_confirm``: an LLM step, then a wait for ``confirm``. The
    worker's model is the scripted provider with the driver's answer, which answers every
    run's call (a script's own entry answers one), and the driver confirms each run."""
    inputs = tmp_path / "documents.jsonl"
    inputs.write_text('{"document": "invoice 1 from ACME, total 12.50 EUR"}\n')
    out = tmp_path / "report"
    args = ["evaluate", "--app", "orchestrator.examples.llm_invoices:app"]
    args += ["--workflow", "invoice_extraction_confirm", "--inputs", str(inputs), "--runs", "3"]
    args += ["--faults", "duplicate_callbacks", "--driver", "tests.waiting_app:llm_driver"]
    done = run_keel(servers, tmp_path, *args, "--out", str(out), timeout_s=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "pass", [c["verdict_reasons"] for c in report["classes"]]
    for c in report["classes"]:
        assert (c["outcomes"], c["model_calls"]) == ({"completed": 3}, 3), c
        assert c["driver_actions"] == {"signal": 3}, c
        _sound_batch(servers, c["prefix"], 3)
