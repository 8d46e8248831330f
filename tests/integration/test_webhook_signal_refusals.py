"""A signal webhook for a run that cannot take it is answered to its sender at once, not
accepted and dropped later (docs/connector.md, "Signals to runs that cannot take them")."""

from __future__ import annotations

import uuid

from orchestrator.domain.model.messages import SignalWorkflow
from tests.integration.test_connector import deliver, start_connector
from tests.support import decode_all, read_topic, wait_until


def _commands(settings) -> list[str]:
    records = read_topic(settings.kafka_servers, settings.topic("commands"), settings.partitions)
    return [e.workflow_id for e in decode_all(records) if isinstance(e.payload, SignalWorkflow)]


def test_late_unknown_and_undeclared_signals_are_answered_not_accepted(
    settings, services, client
) -> None:
    services.start("orchestrator")
    services.start("worker")
    _, url = start_connector(services)
    finished = f"done-{uuid.uuid4().hex[:8]}"
    client.start("parallel_checks", {"n": 2}, workflow_id=finished)
    assert client.wait(finished, 60).status == "completed"

    def added(event_id: str, workflow_id: str) -> dict[str, str]:
        return {"id": event_id, "type": "document.added", "workflow_id": workflow_id,
                "document": "receipt"}  # fmt: skip

    status, body = deliver(url, added("evt-late", finished))
    assert (status, body["error"]) == (
        409, f"workflow '{finished}' is completed; signal 'documents_added' refused",
    )  # fmt: skip
    status, body = deliver(url, added("evt-unknown", "no-such-run"))
    assert (status, body["error"]) == (
        404, "workflow 'no-such-run' does not exist (yet); signal 'documents_added' refused",
    )  # fmt: skip
    # a signal that comes before its start is refused until the start has landed, then taken
    early = f"review-{uuid.uuid4().hex[:8]}"
    assert deliver(url, added("evt-early", early))[0] == 404
    start = {"id": "evt-start", "type": "review.requested", "workflow_id": early,
             "document": "contract"}  # fmt: skip
    assert deliver(url, start)[0] == 202
    wait_until(lambda: client.projection.get(early), 60, "the run to show")
    status, body = deliver(url, added("evt-early", early))
    assert (status, body["status"]) == (202, "accepted")
    assert _commands(settings) == [early]  # the refused ones never reached Kafka
