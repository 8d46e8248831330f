"""SIGKILL the orchestrator while its local activities are mid-call to the ledger:
every posting happens exactly once in the ledger's own books."""

from __future__ import annotations

import random
import time

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import WorkflowCompleted
from orchestrator.payload_schemas.codec import Codec
from tests.integration.local_app import APP
from tests.integration.local_app import app as local_app
from tests.support import assert_sound_history, histories, read_topic, wait_until


def test_orchestrator_sigkilled_mid_local_side_effect_posts_each_invoice_once(
    settings, services, ledger_url, ledger
):
    rng = random.Random(5)
    # Dedupe off: a second POST of one key would be a second effect. Every answer is
    # late, so a kill lands between the ledger's write and the orchestrator's commit.
    ledger.set_faults(dedupe=False, delay_s=0.3, delay_count=1_000_000)
    services.env["KEEL_LEDGER_URL"] = ledger_url
    client = KeelClient(settings, local_app)
    orch = services.start("orchestrator", "--app", APP, KEEL_INSTANCE_ID="local-crashy")
    services.start("worker", "--app", APP)  # runs the status queries
    n, waves = 60, 4
    per_wave = n // waves
    try:
        for w in range(waves):
            client.start_many(
                "local_posting",
                [
                    (f"lp-{i}", {"invoice_id": f"I{i}", "account": "A", "amount": i})
                    for i in range(w * per_wave, (w + 1) * per_wave)
                ],
            )
            calls_before = sum(ledger.ledger()["calls"].values())
            wait_until(
                lambda b=calls_before: sum(ledger.ledger()["calls"].values()) > b,
                60,
                "postings to reach the ledger",
                interval_s=0.02,
            )
            time.sleep(rng.uniform(0.0, 0.2))
            services.kill(orch)
            orch = services.start("orchestrator", "--app", APP, KEEL_INSTANCE_ID="local-crashy")
        wait_until(lambda: client.projection.counts()["completed"] == n, 300, f"{n} completed runs")
    finally:
        client.close()
    book = ledger.ledger()
    keys = {f"lp-{i}/post_to_ledger/1" for i in range(n)}
    assert set(book["effects"]) == keys
    assert set(book["effects"].values()) == {1}, "exactly one effect per workflow"
    assert book["total_effects"] == n
    in_doubt = 0
    for wf, events in histories(settings).items():
        assert_sound_history(wf, events)
        assert isinstance(events[-1].payload, WorkflowCompleted)
        in_doubt += sum(
            e.type == "ActivityFailed" and e.payload.failure_class == "unknown" for e in events
        )
    assert in_doubt > 0, "some kills landed mid-call and went through the status query"
    codec = Codec()
    tasks = read_topic(
        settings.kafka_servers, settings.topic("activity-tasks"), settings.partitions
    )
    types = {codec.decode(r.value()).payload.activity_type for r in tasks}
    assert types == {"ledger_posting_status"}, "the postings themselves ran in-process"
