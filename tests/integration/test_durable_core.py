"""The durable core end to end: real orchestrator and worker processes, real Kafka and Redis."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.domain.model.messages import SignalReceived, WorkflowCompleted
from tests.support import assert_sound_history, histories, read_topic, wait_until


def keel(settings, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    """Run the real `keel` CLI against the test's servers and topic prefix."""
    env = settings.child_environment(**extra_env)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_thousand_dag_workflows_complete_with_sound_histories(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    n = 1000
    client.start_many("parallel_checks", [(f"dag-{i}", {"n": i}) for i in range(n)])
    wait_until(
        lambda: client.projection.counts()["completed"] == n, 240, f"{n} completed workflows"
    )
    by_wf = histories(settings, expect_events=11 * n)
    assert len(by_wf) == n
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)
        assert isinstance(events[-1].payload, WorkflowCompleted)
        i = int(wf.split("-")[1])
        assert json.loads(events[-1].payload.output_json) == {"result": (i + 1) + 2 * i + i * i}


def test_document_review_goes_round_twice_then_refuses_late_signals(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    wf = client.start("document_review", {"document": "invoice 7"}, "review-1").workflow_id

    def waiting_in_round(n: int) -> bool:
        entered = [
            h for h in client.projection.history(wf)
            if h["type"] == "StateEntered" and h["data"]["state"] == "needs_documents"
        ]  # fmt: skip
        return len(entered) == n and client.projection.status(wf) == "waiting"

    for round_no, extra in enumerate(("receipt", "contract"), start=1):
        wait_until(lambda n=round_no: waiting_in_round(n), 60, f"wait number {round_no}")
        client.signal(wf, "documents_added", {"document": extra})
    done = client.wait(wf, 60)
    assert done.status == "completed"
    assert done.output == {"decision": "approved", "documents": 3}
    view = client.show(wf)
    states = [h["data"]["state"] for h in view.history if h["type"] == "StateEntered"]
    assert states == [
        "review",
        "needs_documents",
        "review",
        "needs_documents",
        "review",
        "approved",
    ]
    assert [h["seq"] for h in view.history] == list(range(1, len(view.history) + 1))

    before = histories(settings)[wf]
    late = keel(
        settings, "workflow", "signal", wf, "documents_added", "--payload", '{"document": "x"}'
    )
    assert late.returncode == 1
    assert late.stderr.strip() == (
        f"error: workflow '{wf}' is completed; signal 'documents_added' refused"
    )
    after = histories(settings)[wf]
    assert [e.message_id for e in after] == [e.message_id for e in before]
    assert sum(isinstance(e.payload, SignalReceived) for e in after) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["workflow", "start", "no_such_flow", "--input", "{}"],
            "error: unknown workflow 'no_such_flow'; known workflows: checks_batch, "
            "document_review, invoice_batch, invoice_posting, invoice_posting_patient, "
            "parallel_checks, payment_approval, slow_step, summaries_batch, three_step, timer_demo, "
            "timers_batch, travel_booking",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", '{"n": "many"}'],
            "error: invalid input for workflow 'parallel_checks' v1: field 'n': Input should be "
            "a valid integer, unable to parse string as an integer",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", '{"n": 1'],
            "error: --input is not valid JSON: Expecting ',' delimiter at line 1 column 8",
        ),
        (
            ["workflow", "signal", "ghost", "documents_added", "--payload", "{"],
            "error: --payload is not valid JSON: Expecting property name enclosed in double "
            "quotes at line 1 column 2",
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_writes_nothing(settings, args, message):
    result = keel(settings, *args)
    assert result.returncode == 1
    assert result.stderr.strip() == message
    assert "Traceback" not in result.stderr
    written = read_topic(settings.kafka_servers, settings.topic("commands"), settings.partitions)
    assert written == []


def test_projections_rebuild_restores_the_read_model_from_the_event_store(
    settings, services, client
):
    services.start("orchestrator")
    services.start("worker")
    client.start_many("parallel_checks", [(f"rb-{i}", {"n": i}) for i in range(20)])
    wait_until(lambda: client.projection.counts()["completed"] == 20, 120, "20 completions")
    before = {f"rb-{i}": client.show(f"rb-{i}") for i in range(20)}
    assert client.projection.clear() > 0
    assert client.projection.get("rb-0") is None
    rebuilt = keel(settings, "projections", "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "rebuilt the read model from 220 events" in rebuilt.stdout
    assert {wf: client.show(wf) for wf in before} == before


def test_a_poison_command_goes_to_the_dlq_with_its_origin_and_processing_goes_on(
    settings, services, client
):
    from confluent_kafka import Producer

    services.start("orchestrator")
    services.start("worker")
    producer = Producer({"bootstrap.servers": settings.kafka_servers})
    producer.produce(settings.topic("commands"), key=b"poisoned", value=b"\x00not avro at all")
    producer.flush(10)
    wf = client.start("parallel_checks", {"n": 2}, "after-poison").workflow_id
    assert client.wait(wf, 60).output == {"result": 3 + 4 + 4}
    listed = keel(settings, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [letter] = json.loads(listed.stdout)
    assert letter["kind"] == "record"
    assert letter["workflow_id"] == "poisoned"
    assert letter["reason"] == "undecodable record: bad marker: expected c301, got 006e"
    assert letter["source"].startswith(f"{settings.topic('commands')}[")
