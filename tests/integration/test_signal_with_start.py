"""Signal-with-start on the real stack (docs/workflows.md, "Signal-with-start"): the first
command starts the run and delivers its signal in one decision, the next only signals,
through ``KeelClient.signal_with_start`` and ``keel workflow signal-with-start``; a
signal the workflow never waits for is refused before anything is sent."""

from __future__ import annotations

import json

import pytest

from orchestrator import InvalidInputError
from tests.integration.test_read_model import keel
from tests.support import assert_sound_history, histories

DOC = {"document": "passport"}


def test_the_first_starts_the_run_with_its_signal_and_the_second_only_signals(
    settings, services, client
):
    services.start("orchestrator")
    services.start("worker")
    first = client.signal_with_start(
        "sws-1", "documents_added", {"document": "visa"}, "document_review", DOC
    )
    done = keel(
        settings,
        "workflow",
        "signal-with-start",
        "sws-1",
        "documents_added",
        "--workflow",
        "document_review",
        "--input",
        '{"document": "passport"}',
        "--payload",
        '{"document": "bank statement"}',
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "signal 'documents_added' sent to sws-1, started as document_review if absent ("
    )
    row = client.wait("sws-1", 60)
    assert row.status == "completed", row
    assert row.run_id == first  # the run is the first command's
    assert row.output == {"decision": "approved", "documents": 3}

    events = histories(settings)["sws-1"]
    assert_sound_history("sws-1", events)
    assert [e.causation_id for e in events if e.type == "WorkflowStarted"] == [first]
    received = [e for e in events if e.type == "SignalReceived"]
    assert [json.loads(e.payload.payload_json) for e in received] == [
        {"document": "visa"},
        {"document": "bank statement"},
    ]
    assert received[0].causation_id == first and received[1].causation_id != first


def test_a_signal_the_workflow_never_waits_for_is_refused_before_sending(client):
    with pytest.raises(InvalidInputError) as exc:
        client.signal_with_start("sws-2", "paid", {}, "document_review", DOC)
    assert str(exc.value) == (
        "workflow 'document_review' v1 has no signal 'paid' (known: 'documents_added'); "
        "signal refused"
    )
    assert client.projection.get("sws-2") is None
