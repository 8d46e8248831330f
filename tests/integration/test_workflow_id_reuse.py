"""Reusing a workflow id (docs/workflows.md, "Reusing a workflow id"): the same workflow and
input join the run (exit 0), anything else is refused with exit 4 and a message naming the
run, and the run's history gains nothing, whether the run is waiting or has ended.

Real broker, real Redis, real orchestrator and worker processes (``tests.support.Services``).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, TopicPartition

from orchestrator import WorkflowIdConflictError, WorkflowStatus
from orchestrator.domain.model.messages import WorkflowStarted
from tests.integration.test_read_model import keel
from tests.support import histories, wait_until

EXIT_ID_CONFLICT = 4


def _iso(ms: int) -> str:
    text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", text)
    return text.replace("+00:00", "Z")


def _settled_history(settings, wf: str) -> list:
    """``wf``'s events once the orchestrator decided every command sent so far: its
    consumer group's committed offsets reach the end of the commands topic (a start it
    ignores leaves no other trace, so this is the one barrier that writes nothing)."""
    topic = settings.topic("commands")
    group = Consumer(
        {
            "bootstrap.servers": settings.kafka_servers,
            "group.id": f"{settings.topic_prefix}.orchestrator",  # read, never joined
            "enable.auto.commit": False,
        }
    )
    try:
        parts = [TopicPartition(topic, p) for p in range(settings.partitions)]
        ends = {tp.partition: group.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}

        def decided() -> bool:
            done = group.committed(parts, timeout=10)
            return all(tp.offset >= ends[tp.partition] for tp in done if ends[tp.partition])

        wait_until(decided, 60, "the orchestrator to decide every command sent")
    finally:
        group.close()
    return histories(settings)[wf]


def _start(settings, name: str, wf: str, input_json: str, *extra: str):
    return keel(settings, "workflow", "start", name, "--id", wf, "--input", input_json, *extra)


def test_the_same_id_and_input_twice_is_one_run_and_exit_0_both_times(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    first = _start(settings, "parallel_checks", "same-1", '{"n": 2}', "--json", "--wait")
    assert first.returncode == 0, first.stderr
    started = json.loads(first.stdout)
    assert (started["existed"], started["status"]) == (False, "completed")
    # the same JSON value: other spacing and key order are the same input
    again = _start(settings, "parallel_checks", "same-1", '{ "n" : 2 }', "--json", "--wait")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {**started, "existed": True}
    plain = _start(settings, "parallel_checks", "same-1", '{"n": 2}')
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == f"exists: same-1 (run {started['run_id']})\n"
    events = _settled_history(settings, "same-1")
    starts = [e for e in events if isinstance(e.payload, WorkflowStarted)]
    assert [e.run_id for e in starts] == [started["run_id"]]


def test_a_different_input_or_workflow_under_a_finished_runs_id_exits_4_naming_it(
    settings, services, client
):
    services.start("orchestrator")
    services.start("worker")
    done = _start(settings, "parallel_checks", "reuse-1", '{"n": 1}', "--json", "--wait")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    before = _settled_history(settings, "reuse-1")
    row = client.projection.get("reuse-1")
    assert row is not None and row["status"] == "completed"
    run = (
        f"workflow id 'reuse-1' is taken by run {run_id} of workflow 'parallel_checks' v1 "
        f"(completed, started {_iso(row['started_at'])})"
    )

    other_input = _start(settings, "parallel_checks", "reuse-1", '{"n": 5}', "--wait")
    assert other_input.returncode == EXIT_ID_CONFLICT, other_input.stdout + other_input.stderr
    assert other_input.stdout == ""
    assert other_input.stderr == (
        f"error: {run} with a different input; start refused (the same input joins that run, "
        "another id starts a new one)\n"
    )
    other_workflow = _start(settings, "document_review", "reuse-1", '{"document": "x"}', "--json")
    assert other_workflow.returncode == EXIT_ID_CONFLICT, other_workflow.stderr
    assert other_workflow.stdout == ""
    assert other_workflow.stderr == (
        f"error: {run}, not of 'document_review'; start refused (another id starts a new run)\n"
    )

    after = _settled_history(settings, "reuse-1")
    assert [(e.seq, e.message_id) for e in after] == [(e.seq, e.message_id) for e in before]
    # a finished run's id with its own input still answers with that run, as it ended
    same = _start(settings, "parallel_checks", "reuse-1", '{"n": 1}', "--json", "--wait")
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout) == {**json.loads(done.stdout), "existed": True}


def test_the_client_raises_the_conflict_with_the_runs_fields(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    first = client.start("document_review", {"document": "a lease"}, "review-1")
    assert first.existed is False
    wait_until(lambda: client.projection.status("review-1") == "waiting", 60, "the wait")
    row = client.projection.get("review-1")
    assert row is not None

    joined = client.start("document_review", '{"document": "a lease"}', "review-1")
    assert (joined.run_id, joined.existed) == (first.run_id, True)

    for confirm in (60.0, None):  # None: told from the read model, nothing is sent
        with pytest.raises(WorkflowIdConflictError) as refused:
            client.start(
                "document_review", {"document": "a deed"}, "review-1", confirm_timeout_s=confirm
            )
        e = refused.value
        assert (e.workflow_id, e.run_id, e.name, e.version) == (
            "review-1",
            first.run_id,
            "document_review",
            1,
        )
        assert e.status is WorkflowStatus.WAITING
        assert (e.started_at_ms, e.started_at) == (row["started_at"], _iso(row["started_at"]))
        assert (e.differs, e.requested) == ("input", "document_review")
        assert str(e) == (
            f"workflow id 'review-1' is taken by run {first.run_id} of workflow "
            f"'document_review' v1 (waiting, started {_iso(row['started_at'])}) with a "
            "different input; start refused (the same input joins that run, another id "
            "starts a new one)"
        )

    with pytest.raises(WorkflowIdConflictError) as other:
        client.start("parallel_checks", {"n": 1}, "review-1")
    assert (other.value.differs, other.value.requested) == ("workflow", "parallel_checks")

    events = _settled_history(settings, "review-1")
    assert [type(e.payload).__name__ for e in events].count("WorkflowStarted") == 1
    assert client.projection.get("review-1")["status"] == "waiting"


def test_a_sealed_input_joins_when_its_clear_value_is_the_same(settings, tmp_path):
    """Each start seals afresh (a new nonce), so the recorded input is compared opened."""
    from pydantic import SecretStr

    from orchestrator.client.client import KeelClient
    from orchestrator.trust.sealing import new_key_entry
    from tests.integration import sealed_app
    from tests.support import Services

    key_entry = new_key_entry("k1")
    services = Services(settings, tmp_path, KEEL_SEAL_KEY=key_entry)
    sealed = KeelClient(
        settings.model_copy(update={"seal_key": SecretStr(key_entry)}), sealed_app.app
    )
    try:
        services.start("orchestrator", "--app", sealed_app.APP)
        first = sealed.start("sealed_call", {"name": "acme", "api_key": "sk-1"}, "sealed-1")
        again = sealed.start("sealed_call", {"api_key": "sk-1", "name": "acme"}, "sealed-1")
        assert (again.run_id, first.existed, again.existed) == (first.run_id, False, True)
        with pytest.raises(WorkflowIdConflictError) as refused:
            sealed.start("sealed_call", {"name": "acme", "api_key": "sk-2"}, "sealed-1")
        assert (refused.value.run_id, refused.value.differs) == (first.run_id, "input")
        starts = [e for e in _settled_history(settings, "sealed-1") if e.seq == 1]
        assert [type(e.payload) for e in starts] == [WorkflowStarted]
    finally:
        sealed.close()
        services.stop_all()
