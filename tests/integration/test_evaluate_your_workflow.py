"""``keel evaluate --app --inputs`` on workflows of your own (docs/evaluation.md, "Your
own workflow"), against the real broker and Redis: ``timer_demo`` under the faults that
strike Keel itself, and ``travel_booking`` against the booking service (a real process)
under the faults its worker injects at its handlers, judged from histories and checked
here against the booking service's own books. The batches' histories are read back and
checked."""

from __future__ import annotations

import json
from collections import Counter

from orchestrator.domain.model.keys import parse_idempotency_key
from tests.integration.test_evaluate import _sound_batch
from tests.sagas_support import booking, booking_url, trip  # noqa: F401
from tests.support import run_keel


def test_a_workflow_of_your_own_is_evaluated_under_crash_duplicates_and_its_next_version(
    servers, tmp_path
):
    """``--app --inputs``: timer_demo runs (in flight on their timers when the crash
    strikes) end as their fault-free runs did, every start sent three times joins its run,
    and the runs of v1 asleep when v2 is deployed migrate at their timer and end on v2;
    the classes that need a write or a compensation are not chosen for it."""
    inputs = tmp_path / "timers.jsonl"
    inputs.write_text('{"seconds": 5}\n{"seconds": 8}\n')
    out = tmp_path / "report"
    args = ["evaluate", "--app", "orchestrator.examples:app", "--workflow", "timer_demo"]
    args += ["--inputs", str(inputs), "--runs", "4", "--out", str(out)]
    done = run_keel(servers, tmp_path, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert (report["verdict"], report["app"], report["workflow"]) == (
        "pass",
        "orchestrator.examples:app",
        "timer_demo",
    )
    classes = {c["fault"]: c for c in report["classes"]}
    assert list(classes) == ["none", "crash", "duplicate_callbacks", "old_schema"]
    for c in classes.values():
        assert (c["runs"], c["succeeded"], c["duplicate_effects"]) == (4, 4, 0), c
        assert c["outcomes"] == {"completed": 4}
    assert classes["crash"]["fault_hits"] > 0
    assert all(r["node_at_fault"] == "sleep" for r in classes["crash"]["recovery"])
    assert classes["duplicate_callbacks"]["deliveries"] == 4 * 3
    old = classes["old_schema"]
    assert old["fault_hits"] == 2 and old["fault_fired"] == 1, old["fault_hits"]
    assert old["what"].startswith("half the runs start on your latest version, with no worker")
    # The two v1 runs were asleep at the deployment; one whose timer fires before its
    # migration is decided ends on v1 (the migration refused: the run had finished).
    versions = old["versions"]
    answers = versions["migrations_answered"]
    assert versions["started_on"] == {"1": 2, "2": 2}, versions
    assert sum(answers.values()) == 2 and set(answers) <= {"migrated", "refused"}, answers
    assert versions["migrated"] == answers.get("migrated", 0) >= 1, versions
    ended_on = {"1": 2 - versions["migrated"], "2": 2 + versions["migrated"]}
    assert versions["ended_on"] == {v: n for v, n in ended_on.items() if n}, versions
    for c in report["classes"]:
        _sound_batch(servers, c["prefix"], 4)  # 4 runs: a repeated start joined its run


def test_your_writes_survive_a_crash_lost_answers_an_outage_and_failing_compensations(
    servers,
    tmp_path,
    booking,  # noqa: F811
):
    """travel_booking: two trips booked, one declined card undone, in every batch. The
    crash strikes while the worker holds a call of a run with a reservation behind it; a
    lost answer is settled by ``booking_status``; an outage of the booking service is waited
    out within the write retries; a cancellation that keeps failing ends the declined
    trip ``compensation_failed``. The booking service's books: every run reserved its
    hotel and flight once, under keys new to it in each batch."""
    inputs = tmp_path / "trips.json"
    inputs.write_text(json.dumps([trip(1), trip(2), trip(3, declined=True)]))
    out = tmp_path / "report"
    args = ["evaluate", "--app", "orchestrator.examples:app", "--workflow", "travel_booking"]
    args += ["--inputs", str(inputs), "--runs", "3", "--out", str(out)]
    args += ["--faults", "crash,response_loss,compensation_failure,queue_full"]
    done = run_keel(servers, tmp_path, *args, env={"KEEL_BOOKING_URL": booking.base_url})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    classes = {c["fault"]: c for c in report["classes"]}
    assert list(classes) == ["none", "crash", "response_loss", "compensation_failure", "queue_full"]
    assert report["verdict"] == "pass", [c["verdict_reasons"] for c in report["classes"]]
    for fault, c in classes.items():
        undone = "compensation_failed" if fault == "compensation_failure" else "compensated"
        assert c["outcomes"] == {"completed": 2, undone: 1}, c
        assert (c["duplicate_effects"], c["re_executed_activities"]) == (0, 0), c
        assert c["history_violations"] == 0
        assert c["queue_backlog"]["kafka_lag"]["series"], fault
    crash = classes["crash"]  # during a call the worker held, of a run with a call behind it
    assert crash["fault_fired"] == 1 and crash["fault_hits"] >= 1, crash["recovery"]
    assert all(r["node_at_fault"] and r["recovered_at_node"] for r in crash["recovery"])
    lost = classes["response_loss"]
    assert lost["fault_fired"] >= 1 and lost["fault_hits"] >= 1
    assert lost["unknown_outcomes"] == lost["settled_by_status_query"] >= 1
    stuck = classes["compensation_failure"]
    assert (stuck["fault_hits"], stuck["compensations_failed"]) == (1, 1)
    assert stuck["fault_fired"] >= 2  # a cancellation, retried, failed each time
    outage = classes["queue_full"]
    assert outage["queue_backlog"]["outage_s"] == 3.0 and outage["fault_hits"] >= 1
    assert outage["retries_by_class"]["transient"] >= 2

    books = booking.books()
    per_run = Counter(
        (parse_idempotency_key(r["key"])[0], r["kind"]) for r in books["reservations"].values()
    )
    assert len(per_run) == 5 * 3 * 2 and set(per_run.values()) == {1}, per_run
    assert len(books["live"]) == 5 * 2 * 2 + 2  # the one run compensation could not undo
    assert len(books["charges"]) == 5 * 2
    for c in report["classes"]:
        _sound_batch(servers, c["prefix"], 3)
