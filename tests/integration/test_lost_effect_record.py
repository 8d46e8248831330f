"""An effect record a Redis failover lost (docs/operations.md, "Redis high availability
(Sentinel)"): the same task comes again, finds no record and calls out again, and the
external system's own idempotency check answers with the first posting. The ledger's books
keep one posting, the run's history is untouched, and the record is written again.

Other lost writes have their own tests: a lost webhook dedupe marker
(tests/integration/test_connector.py, the redelivery is decided once by its message id) and
lost read-model rows (tests/integration/test_durable_core.py, ``keel projections rebuild``).
"""

from __future__ import annotations

from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    CompleteActivity,
)
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from orchestrator.io.redis.keyspace import Keyspace
from tests.support import histories, produce, read_topic, reports, wait_until


def test_a_lost_effect_record_is_rechecked_by_the_idempotency_key_and_posts_once(
    settings, services, client, ledger_url, ledger
):
    services.env["KEEL_LEDGER_URL"] = ledger_url
    services.start("orchestrator")
    services.start("worker")
    wf = "lost-record"
    run = client.start("invoice_posting", {"invoice_id": "I1", "account": "A", "amount": 7}, wf)
    assert client.wait(run.workflow_id, 90).status == "completed"
    before = histories(settings)[wf]
    idempotency_key = f"{wf}/post_to_ledger/1"
    assert ledger.ledger()["calls"] == {idempotency_key: 1}

    # The failover lost the record (the promoted replica never had it) ...
    r = redis_client(settings.redis, RedisUse.WORKER_RECORDS)
    record = Keyspace(settings.topic_prefix).effect(idempotency_key)
    assert r.hget(record, "state") == "committed"
    assert r.delete(record) == 1
    # ... and the task comes again (a worker that died before its report was sent).
    [task] = read_topic(settings.kafka_servers, settings.topic("activity-tasks"), 4, 1)
    produce(settings, "activity-tasks", [(task.key(), task.value())])

    wait_until(lambda: ledger.ledger()["calls"].get(idempotency_key) == 2, 60, "the second call")
    book = ledger.ledger()
    assert book["effects"] == {idempotency_key: 1}, "the ledger's own check: one posting"
    assert book["total_effects"] == 1
    wait_until(lambda: r.hget(record, "state") == "committed", 30, "the record written again")
    wait_until(lambda: _completions_reported(settings, wf) == 2, 60, "the second report")

    after = histories(settings)[wf]
    assert [e.message_id for e in after] == [e.message_id for e in before], "history untouched"
    assert sum(isinstance(e.payload, ActivityCompleted) for e in after) == 1
    assert sum(isinstance(e.payload, ActivityScheduled) for e in after) == 1


def _completions_reported(settings, wf: str) -> int:
    return sum(isinstance(c.payload, CompleteActivity) for c in reports(settings, wf))
