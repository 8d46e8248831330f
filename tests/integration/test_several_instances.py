"""Connectors and projectors run as several instances (issue 47 item 2).

Two connectors take the same signed webhooks (each delivery sent to both, as a load
balancer retrying on the other instance would: the second answers 200, a duplicate) and two standalone projectors share the
events topic's partitions (one consumer group) beside an orchestrator run with
``--no-projector``. One projector is SIGKILLed halfway: the other takes its partitions
over. Every delivery is applied exactly once (the runs' histories), and the read model
written by the two projectors shows every run and every signal.
"""

from __future__ import annotations

import json
import uuid

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import SignalReceived
from tests.integration.test_webhook_dedupe_lifetime import deliver
from tests.integration.webhook_loop_app import SECRETS_ENV
from tests.integration.webhook_loop_app import app as loop_app
from tests.support import assert_sound_history, histories, wait_until

APP = "tests.integration.webhook_loop_app:app"
RUNS = 12


def _listening(proc) -> str | None:
    for line in proc.log_path.read_text().splitlines():
        if line.startswith("connector listening on "):
            return line.split()[3]
    return None


def _signals_in_read_model(client: KeelClient, wf: str) -> int:
    return sum(h["type"] == "SignalReceived" for h in client.projection.history(wf))


def test_two_connectors_and_two_projectors_apply_each_webhook_once(settings, services):
    from tests.integration import test_webhook_dedupe_lifetime as loop

    env = {SECRETS_ENV: loop.SECRET}
    services.start("orchestrator", "--app", APP, "--no-projector")
    projectors = [services.start("projector", "--app", APP) for _ in range(2)]
    connectors = [services.start("connector", "--app", APP, "--port", "0", **env) for _ in "ab"]
    urls = [wait_until(lambda p=p: _listening(p), 60, "a connector to listen") for p in connectors]
    client = KeelClient(settings, loop_app)
    ids = [f"several-{n}" for n in range(RUNS)]
    try:
        for wf in ids:
            client.start("inbox", {}, wf)

        def send_round(tag: str) -> None:
            for n, wf in enumerate(ids):
                event = {"id": f"{tag}-{uuid.uuid4().hex[:6]}-{n}", "workflow_id": wf, "doc": tag}
                # the other instance gets it too: a duplicate by the shared marker
                first, again = urls[n % 2], urls[(n + 1) % 2]
                assert (deliver(first, event), deliver(again, event)) == (202, 200)

        send_round("first")
        wait_until(
            lambda: all(_signals_in_read_model(client, wf) == 1 for wf in ids),
            90,
            "the first round in the read model",
        )
        services.kill(projectors[0])  # the other projector takes its partitions over
        send_round("second")
        wait_until(
            lambda: all(_signals_in_read_model(client, wf) == 2 for wf in ids),
            120,
            "the second round in the read model, written by the surviving projector",
        )
        assert projectors[1].poll() is None
        for wf in ids:
            client.cancel(wf, "the inbox is closed")
        for wf in ids:
            assert client.wait(wf, 60).status == "cancelled"
    finally:
        client.close()
    by_wf = histories(settings)
    for wf in ids:
        docs = [
            json.loads(e.payload.payload_json)["doc"]
            for e in by_wf[wf]
            if isinstance(e.payload, SignalReceived)
        ]
        assert docs == ["first", "second"], f"{wf}: {docs} (each delivery went to both)"
        assert_sound_history(wf, by_wf[wf])
