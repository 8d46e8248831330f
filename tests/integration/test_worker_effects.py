"""A side effect whose result is refused after the write: the claim is kept, no second write.

Real orchestrator and worker processes, the real ledger service and its own books.
"""

from __future__ import annotations

import json

from handlers.effects import EffectStore
from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import ActivityFailed, ActivityScheduled, FailActivity
from orchestrator.payload_schemas.codec import Codec
from tests.integration import worker_app
from tests.integration.worker_app import APP
from tests.support import (
    Services,
    assert_sound_history,
    histories,
    produce,
    reports,
    task_envelope,
    wait_until,
)

REFUSED = (
    "result of activity 'post_then_misreport' refused after the handler returned; its effect "
    "is recorded and will not be repeated: invalid Posting: field 'key': Field required; "
    "field 'posting_id': Field required"
)


def test_a_result_refused_after_the_write_keeps_the_claim_and_never_writes_twice(
    settings, tmp_path, ledger_url, ledger
):
    ledger.set_faults(dedupe=False)  # a second POST of the key would be a second posting
    svc = Services(settings, tmp_path, KEEL_LEDGER_URL=ledger_url)
    client = KeelClient(settings, worker_app.app)
    try:
        svc.start("orchestrator", "--app", APP)
        worker = svc.start("worker", "--app", APP)
        wf = client.start("misreported_posting", {"invoice_id": "I1", "account": "A", "amount": 5})
        done = client.wait(wf.workflow_id, 60)
        assert done.status == "failed"
        events = histories(settings)[wf.workflow_id]
        assert_sound_history(wf.workflow_id, events)
        [scheduled] = [e.payload for e in events if isinstance(e.payload, ActivityScheduled)]
        [failed] = [e.payload for e in events if isinstance(e.payload, ActivityFailed)]
        assert (failed.failure_class, failed.error_type) == ("permanent", "ValidationError")
        assert failed.message == REFUSED
        key = scheduled.idempotency_key
        assert ledger.ledger()["calls"] == {key: 1}

        # The same task again (a redelivery after a crash before the offset commit) and
        # a higher attempt (a retry or a redrive): both report the refusal, neither posts.
        codec = Codec()
        again = [
            task_envelope(
                wf.workflow_id,
                "post_then_misreport",
                scheduled.input_json,
                attempt=attempt,
                activity_id=scheduled.activity_id,
                message_id=f"again/{attempt}",
            )
            for attempt in (1, 2)
        ]
        for env in again:  # same key as the first dispatch
            assert env.payload.idempotency_key == key
        produce(
            settings, "activity-tasks", [(wf.workflow_id.encode(), codec.encode(e)) for e in again]
        )

        def answers():
            got = [
                r.payload
                for r in reports(settings, wf.workflow_id)
                if r.causation_id in {"again/1", "again/2"}
            ]
            return got if len(got) == 2 else None

        for answer in wait_until(answers, 60, "the worker's answers to the redeliveries"):
            assert isinstance(answer, FailActivity)
            assert (answer.failure_class, answer.error_type) == ("permanent", "ValidationError")
            assert answer.message == REFUSED
        book = ledger.ledger()
        assert book["calls"] == {key: 1}, "the refused result never led to a second POST"
        assert book["effects"] == {key: 1}
        record = EffectStore.from_url(settings.redis, settings.topic_prefix).get(key)
        assert record["state"] == "refused"
        assert json.loads(record["raw"]) == {"posting": book["postings"][0]["posting_id"]}
        assert worker.poll() is None
    finally:
        svc.stop_all()
        client.close()
