"""A run whose history the current definition cannot fold is quarantined, never reopened.

Before: recovery logged the HistoryError and left the run out of memory, so a repeated
start wrote a second ``WorkflowStarted`` at seq 1 into the same stream.
"""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Producer

from orchestrator.domain.model.messages import (
    Envelope,
    StartWorkflow,
    StateEntered,
    WorkflowStarted,
)
from orchestrator.engine.recovery import TYPE_HEADER
from orchestrator.examples import app
from orchestrator.io.partitioning import partition_for
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import now_ms
from tests.support import decode_all, histories, read_topic, wait_until

codec = Codec()


def _env(wf: str, seq: int, payload, run_id: str = "run-q") -> Envelope:
    return Envelope(
        message_id=uuid.uuid4().hex,
        workflow_id=wf,
        run_id=run_id,
        seq=seq,
        type=type(payload).__name__,
        recorded_at=now_ms(),
        payload=payload,
    )


def test_an_unfoldable_history_is_quarantined_and_a_repeated_start_is_dead_lettered(
    settings, services, client, tmp_path
):
    wf = "q-broken"
    p = partition_for(wf.encode(), settings.partitions)
    review = app.latest("document_review")
    raw = Producer({"bootstrap.servers": settings.kafka_servers})
    for ev in (
        _env(
            wf, 1, WorkflowStarted(review.name, review.version, review.digest, '{"document":"a"}')
        ),
        _env(wf, 2, StateEntered("a_state_that_was_deleted", 1)),
    ):
        raw.produce(
            settings.topic("events"),
            key=wf.encode(),
            value=codec.encode(ev),
            partition=p,
            headers=[(TYPE_HEADER, ev.type.encode())],
        )
    assert raw.flush(30) == 0

    home = tmp_path / "home"
    orch = services.start("orchestrator", KEEL_HOME=str(home), KEEL_INSTANCE_ID="quarantine")
    services.start("worker")
    start = _env(wf, 0, StartWorkflow("document_review", None, '{"document": "a"}'), "")
    raw.produce(settings.topic("commands"), key=wf.encode(), value=codec.encode(start), partition=p)
    assert raw.flush(30) == 0

    records = wait_until(
        lambda: read_topic(settings.kafka_servers, settings.topic("dlq"), settings.partitions),
        60,
        "the dead letter of the repeated start",
    )
    [letter] = decode_all(records)
    assert letter.workflow_id == wf
    assert letter.payload.reason == (
        f"workflow '{wf}' is quarantined: cannot rebuild: {review.label} "
        "has no state 'a_state_that_was_deleted'"
    )

    # the engine keeps moving, and the broken stream never got a second seq 1
    done = client.start("three_step", {"n": 1}, "q-healthy").workflow_id
    assert client.wait(done, 60).status == "completed"
    assert orch.poll() is None
    assert [e.seq for e in histories(settings)[wf]] == [1, 2]

    # the quarantine is visible in the orchestrator's status, with its reason
    status_file = home / "status" / "orchestrator-quarantine.json"
    status = wait_until(
        lambda: status_file.exists() and json.loads(status_file.read_text()),
        30,
        "the status file",
    )
    [entry] = status["quarantined"]
    assert entry["workflow_id"] == wf and entry["partition"] == p
    assert "a_state_that_was_deleted" in entry["reason"]
    assert p in status["assigned_partitions"]
