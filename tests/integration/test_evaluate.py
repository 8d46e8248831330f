"""``keel evaluate`` at a reduced size on the invoice pipeline (issue 36), against the real
broker and Redis: every fault class is injected and proven to have hit runs in flight,
every run ends as the fault-free run of its input did, no effect is made twice, every run
in flight at the crash goes on from the node it was at, and report.json holds every
metric docs/evaluation.md names, for the backbone and, beside it, the all-agent variant.
The batches' histories are read back and checked here."""

from __future__ import annotations

import json

from orchestrator.config.settings import Settings
from tests.support import assert_sound_history, histories, run_keel

FAULTS = (
    "crash",
    "response_loss",
    "duplicate_callbacks",
    "compensation_failure",
    "queue_full",
    "old_schema",
)
METRICS = {
    "runs", "ended", "succeeded", "success_rate", "outcomes", "node_failures",
    "retries_by_class", "attempts", "duplicate_effects", "re_executed_activities",
    "unknown_outcomes", "settled_by_status_query", "compensations", "compensations_failed",
    "compensation_success_rate", "end_to_end_s", "wait_per_state_s",
    "execution_per_activity_s", "model_calls", "tokens", "cost_usd",
    "cost_per_successful_task_usd", "human_tasks", "human_wait_s", "human_sla_breaches",
    "queue_backlog", "versions", "fault_hits", "fault_fired", "fault_at_ms", "recovery",
    "history_violations", "failed_runs", "wrong_outcomes", "diagnosable_wrong_outcomes",
    "verdict", "verdict_reasons",
}  # fmt: skip


def _sound_batch(servers, prefix: str, runs: int) -> dict[str, list]:
    """A batch's histories, read back from its prefix: ``runs`` of them, each sound."""
    settings = Settings(
        bootstrap_servers=servers.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=prefix,
        partitions=4,
    )
    found = histories(settings)
    assert len(found) == runs
    for wf, events in found.items():
        assert_sound_history(wf, events)
    return found


def test_every_fault_class_hits_in_flight_runs_and_the_pipeline_recovers(servers, tmp_path):
    out = tmp_path / "report"
    args = ["evaluate", "--runs", "9", "--faults", ",".join(FAULTS), "--out", str(out)]
    done = run_keel(servers, tmp_path, *args, timeout_s=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "pass" and report["judged"] == "backbone"
    assert [(c["variant"], c["fault"]) for c in report["classes"]] == [
        (variant, fault) for variant in ("backbone", "agent") for fault in ("none", *FAULTS)
    ]
    agent = {c["fault"]: c for c in report["classes"] if c["variant"] == "agent"}
    for name, c in agent.items():  # a finding, not a verdict: only what must hold
        assert set(c) >= METRICS, METRICS - set(c)
        assert c["ended"] == 9 and c["history_violations"] == 0, (name, c["failed_runs"])
        assert c["diagnosable_wrong_outcomes"] <= c["wrong_outcomes"]
    assert agent["none"]["verdict"] == "pass", agent["none"]["verdict_reasons"]
    classes = {c["fault"]: c for c in report["classes"] if c["variant"] == "backbone"}
    assert list(classes) == ["none", *FAULTS]
    for name, c in classes.items():
        assert set(c) >= METRICS, METRICS - set(c)
        assert (c["runs"], c["ended"], c["succeeded"]) == (9, 9, 9), (name, c["failed_runs"])
        assert c["duplicate_effects"] == 0 and c["re_executed_activities"] == 0, name
        assert c["history_violations"] == 0 and c["failed_runs"] == [], name
        assert c["verdict"] == "pass", (name, c["verdict_reasons"])
        assert (c["fault_hits"] > 0) == (name != "none"), (name, c["fault_hits"])
    crash = classes["crash"]
    assert crash["recovery"] and all(r["recovered_at_node"] for r in crash["recovery"])
    assert all(r["node_at_fault"] for r in crash["recovery"]), crash["recovery"]
    lost = classes["response_loss"]
    assert lost["unknown_outcomes"] >= 2 and lost["settled_by_status_query"] >= 2
    dup = classes["duplicate_callbacks"]
    assert dup["deliveries"] == 9 * 3 and dup["decisions_repeated"] == dup["decisions_sent"] > 0
    assert dup["fault_fired"] == 9 * 2 + dup["decisions_repeated"]
    failing = classes["compensation_failure"]
    assert failing["outcomes"].get("compensation_failed") == 1
    assert failing["compensation_success_rate"] == 0.0
    assert classes["none"]["compensation_success_rate"] == 1.0
    full = classes["queue_full"]["queue_backlog"]
    assert full["peak"] >= 2 and full["outage_s"] >= 3.0, full
    assert classes["none"]["queue_backlog"]["peak"] == 0
    old = classes["old_schema"]["versions"]
    assert old["started_on"].get("1", 0) > 0 and old["started_on"].get("2", 0) > 0, old
    assert old["migrated"] == old["migrations_answered"].get("migrated", 0), old
    assert agent["old_schema"]["versions"]["started_on"].get("2", 0) > 0
    for name, c in classes.items():  # Kafka's view: the orchestrator's and workers' groups
        lag = c["queue_backlog"]["kafka_lag"]
        assert lag["series"], name
        assert {"commands <- orchestrator", "activity-tasks <- workers"} <= set(lag["peak"])
    for png in ("latency.png", "outcomes.png", "cost.png", "backlog.png", "kafka_lag.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert 'id="verdict">pass<' in html and "data:image/png;base64," in html
    assert 'id="comparison"' in html

    # the crash hit runs in flight: events of theirs before and after the SIGKILL
    kill = crash["fault_at_ms"]
    for c in report["classes"]:
        if c["variant"] != "backbone":
            continue
        runs = _sound_batch(servers, c["prefix"], 9)
        if c["fault"] == "crash":
            spanning = [
                wf
                for wf, events in runs.items()
                if events[0].recorded_at < kill < events[-1].recorded_at
            ]
            assert len(spanning) == crash["fault_hits"] > 0


def test_a_seeded_bug_that_reexecutes_completed_work_on_recovery_fails_the_verdict(
    servers, tmp_path
):
    """The seeded bug ``reexecute_on_recovery`` (ops/faults/service_faults.py, injected as
    adapter hooks): the restarted worker runs every task
    again and the orchestrator records the completions again. The report must say so."""
    out = tmp_path / "report"
    args = ["evaluate", "--runs", "6", "--faults", "crash", "--variants", "backbone"]
    args += ["--seeded-bug", "reexecute_on_recovery", "--batch-timeout", "90", "--out", str(out)]
    done = run_keel(servers, tmp_path, *args)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "fail" and report["seeded_bug"] == "reexecute_on_recovery"
    none, crash = report["classes"]
    assert none["verdict"] == "pass", none["verdict_reasons"]  # no recovery, no bug
    assert crash["verdict"] == "fail" and crash["re_executed_activities"] > 0
    assert (
        f"{crash['re_executed_activities']} completed activity(ies) ran again"
        in (crash["verdict_reasons"])
    )
    assert any(not r["recovered_at_node"] and r["re_executed"] for r in crash["recovery"])
    assert "completed activity(ies) ran again" in done.stdout
