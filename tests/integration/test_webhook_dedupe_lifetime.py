"""A webhook is applied once for the whole life of its run, whatever Redis forgets.

Issue 29, item 4: after the connector's Redis dedupe marker is deleted and 1,001 other
commands reach the run (more than the orchestrator's window of recent command ids, and
across several continue-as-new runs), the same signed delivery re-sent by its sender
is accepted by the connector (its marker is gone) and written to Kafka again, and the
workflow writes nothing for it: the run remembers every signal command it recorded.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from connectors.signing import signature_header
from connectors.webhooks import message_id
from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import SignalReceived, WorkflowContinuedAsNew
from orchestrator.domain.model.state import SEEN_COMMANDS_WINDOW
from tests.integration.test_connector import (
    commands_with_id,
    delete_dedupe_keys,
    request,
)
from tests.integration.webhook_loop_app import EVERY, SECRETS_ENV, SOURCE
from tests.integration.webhook_loop_app import app as loop_app
from tests.support import assert_sound_history, histories, wait_until

APP = "tests.integration.webhook_loop_app:app"
SECRET = f"whsec_{uuid.uuid4().hex}"
OTHERS = SEEN_COMMANDS_WINDOW + 1


def deliver(url: str, event: dict[str, Any]) -> int:
    body = json.dumps(event).encode()
    headers = {
        "Keel-Signature": signature_header([SECRET], int(time.time()), body),
        "Content-Type": "application/json",
    }
    return request("POST", f"{url}/webhooks/{SOURCE}", body, headers)[0]


def docs(settings, wf: str) -> list[str]:
    events = histories(settings).get(wf, [])
    return [
        json.loads(e.payload.payload_json)["doc"]
        for e in events
        if isinstance(e.payload, SignalReceived)
    ]


def test_a_webhook_resent_after_its_marker_and_1001_commands_is_not_applied_again(
    settings, services
):
    services.start("orchestrator", "--app", APP)
    proc = services.start("connector", "--app", APP, "--port", "0", **{SECRETS_ENV: SECRET})
    url = wait_until(
        lambda: next(
            (
                line.split()[3]
                for line in proc.log_path.read_text().splitlines()
                if line.startswith("connector listening on ")
            ),
            None,
        ),
        60,
        "the connector to listen",
        0.1,
    )
    client = KeelClient(settings, loop_app)
    try:
        wf = "inbox-1"
        client.start("inbox", {}, wf)
        event = {"id": "evt-1", "workflow_id": wf, "doc": "invoice-7.pdf"}
        assert deliver(url, event) == 202
        wait_until(lambda: docs(settings, wf) == ["invoice-7.pdf"], 60, "the first delivery")

        # Redis loses the marker, and more commands than the window reach the run
        assert delete_dedupe_keys(settings) == 1
        for i in range(OTHERS):
            client.signal(wf, "doc", {"doc": f"other-{i}"})
        wait_until(lambda: len(docs(settings, wf)) == 1 + OTHERS, 120, "the other commands")

        # the sender re-sends the same delivery: accepted again (the marker is gone) ...
        assert deliver(url, event) == 202
        # ... and a fresh delivery after it: once it is applied, the repeat was decided
        # (one partition per workflow id keeps their order)
        assert deliver(url, {"id": "evt-2", "workflow_id": wf, "doc": "last.pdf"}) == 202
        wait_until(lambda: docs(settings, wf)[-1:] == ["last.pdf"], 60, "the last delivery")
        client.cancel(wf, "the inbox is closed")
        assert client.wait(wf, 60).status == "cancelled"
    finally:
        client.close()

    received = docs(settings, wf)
    assert received.count("invoice-7.pdf") == 1, "the re-sent webhook was applied again"
    assert len(received) == 1 + OTHERS + 1
    assert commands_with_id(settings, message_id(SOURCE, "evt-1")) == 2  # both reached Kafka
    events = histories(settings)[wf]
    continued = sum(isinstance(e.payload, WorkflowContinuedAsNew) for e in events)
    assert continued == len(received) // EVERY >= 4  # the memory crossed several runs
    assert_sound_history(wf, events)
