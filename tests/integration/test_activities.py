"""Activities that fail well, against a real ledger service, Kafka and Redis."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from orchestrator.domain.model.messages import (
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    ActivityTimedOut,
    TimerScheduled,
    WorkflowFailed,
)
from tests.integration.test_durable_core import keel
from tests.support import Services, assert_sound_history, histories, read_topic, wait_until


def invoice(i: int, amount: float = 10.0, account: str = "ACME") -> dict:
    return {"invoice_id": f"INV-{i}", "account": account, "amount": amount}


def _scheduled(events, activity_type: str) -> list:
    return [
        e.payload
        for e in events
        if isinstance(e.payload, ActivityScheduled) and e.payload.activity_type == activity_type
    ]


@pytest.fixture
def running(settings, tmp_path, ledger_url):
    svc = Services(settings, tmp_path, KEEL_LEDGER_URL=ledger_url)
    svc.start("orchestrator")
    svc.start("worker")
    try:
        yield svc
    finally:
        svc.stop_all()


def test_response_lost_after_commit_completes_through_the_status_query(
    settings, running, client, ledger
):
    ledger.set_faults(drop_after_commit=1, dedupe=False)
    wf = client.start("invoice_posting", invoice(1), "lost-1").workflow_id
    done = client.wait(wf, 60)
    assert done.status == "completed"
    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    posts = _scheduled(events, "post_to_ledger")
    assert [p.attempt for p in posts] == [1], "the write was never sent twice"
    failed = [e.payload for e in events if isinstance(e.payload, ActivityFailed)]
    assert [(f.failure_class, f.error_type) for f in failed] == [("unknown", "OutcomeUnknownError")]
    assert len(_scheduled(events, "ledger_posting_status")) == 1
    key = posts[0].idempotency_key
    book = ledger.ledger()
    assert book["effects"] == {key: 1}
    assert book["calls"] == {key: 1}
    assert done.output == {"posting_id": ledger.posting(key)["posting_id"]}


def test_transient_bursts_are_retried_with_growing_jittered_gaps_and_4xx_never(
    settings, running, client, ledger
):
    ledger.set_faults(status_429=2, status_500=1)
    wf = client.start("invoice_posting", invoice(2), "bursty").workflow_id
    assert client.wait(wf, 60).status == "completed"
    events = histories(settings)[wf]
    posts = _scheduled(events, "post_to_ledger")
    assert [p.attempt for p in posts] == [1, 2, 3, 4]
    assert len({p.idempotency_key for p in posts}) == 1, "retries keep the idempotency key"
    retry_timers = [e for e in events if isinstance(e.payload, TimerScheduled)
                    and e.payload.purpose.startswith("retry:")]  # fmt: skip
    delays = [t.payload.fire_at - t.recorded_at for t in retry_timers]
    caps = [200, 400, 800]  # initial 200 ms, coefficient 2: full jitter in [0, cap]
    assert len(delays) == 3
    assert all(0 <= d <= cap for d, cap in zip(delays, caps, strict=True)), delays
    assert len(set(delays)) > 1, "full jitter: the gaps are not all equal"
    assert ledger.ledger()["total_effects"] == 1

    ledger.reset()
    bad = client.start("invoice_posting", invoice(3, account=""), "refused").workflow_id
    done = client.wait(bad, 60)
    assert done.status == "failed"
    events = histories(settings)[bad]
    assert [p.attempt for p in _scheduled(events, "post_to_ledger")] == [1], "4xx: no retry"
    failed = [e.payload for e in events if isinstance(e.payload, ActivityFailed)]
    assert [f.failure_class for f in failed] == ["permanent"]
    assert "ledger refused the posting (400)" in failed[0].message
    assert isinstance(events[-1].payload, WorkflowFailed)


def test_exhausted_attempts_dead_letter_with_context_and_redrive_completes(
    settings, running, client, ledger
):
    ledger.set_faults(down=True)
    wf = client.start("invoice_posting", invoice(4), "dead-1").workflow_id
    wait_until(lambda: client.projection.status(wf) == "needs_attention", 60, "needs_attention")
    listed = keel(settings, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    letters = [x for x in json.loads(listed.stdout) if x["workflow_id"] == wf]
    assert len(letters) == 1
    letter = letters[0]
    assert letter["kind"] == "activity"
    assert letter["activity_id"] == "run#1/post"
    assert letter["attempts"] == 4
    assert letter["reason"].startswith(
        "activity 'run#1/post' dead-lettered after 4 attempts: TransientError: ledger answered 503"
    )
    ledger.set_faults(down=False)
    redriven = keel(settings, "dlq", "redrive", letter["id"])
    assert redriven.returncode == 0, redriven.stderr
    assert client.wait(wf, 60).status == "completed"
    events = histories(settings)[wf]
    assert any(isinstance(e.payload, ActivityDeadLettered) for e in events)
    posts = _scheduled(events, "post_to_ledger")
    assert [p.attempt for p in posts] == [1, 2, 3, 4, 5]
    assert ledger.ledger()["total_effects"] == 1

    listed = keel(settings, "dlq", "list", "--json")
    assert [x for x in json.loads(listed.stdout) if x["workflow_id"] == wf] == []
    listed = keel(settings, "dlq", "list", "--json", "--all")
    assert [x["state"] for x in json.loads(listed.stdout) if x["id"] == letter["id"]] == [
        "redriven"
    ]
    again = keel(settings, "dlq", "redrive", letter["id"])
    assert again.returncode == 1
    assert "was already redriven at " in again.stderr
    assert [e.payload.attempt for e in histories(settings)[wf]
            if isinstance(e.payload, ActivityScheduled)] == [1, 2, 3, 4, 5]  # fmt: skip


def test_a_downstream_outage_is_paced_by_the_retry_budget(
    settings, tmp_path, client, ledger_url, ledger
):
    rate, burst = 4, 4
    svc = Services(
        settings,
        tmp_path,
        KEEL_LEDGER_URL=ledger_url,
        KEEL_RETRY_BUDGET_PER_S=str(rate),
        KEEL_RETRY_BUDGET_BURST=str(burst),
    )
    try:
        svc.start("orchestrator")
        svc.start("worker")
        ledger.set_faults(down=True)
        n = 20
        client.start_many("invoice_posting_patient", [(f"storm-{i}", invoice(i)) for i in range(n)])
        wait_until(lambda: ledger.ledger()["calls"], 30, "the first calls")
        time.sleep(4)
        ledger.set_faults(down=False)
        wait_until(lambda: client.projection.counts()["completed"] == n, 120, "recovery")
    finally:
        svc.stop_all()
    by_wf = histories(settings)
    retries = sorted(
        e.recorded_at
        for events in by_wf.values()
        for e in events
        if isinstance(e.payload, ActivityScheduled) and e.payload.attempt > 1
    )
    assert retries, "the outage caused retries"
    per_second = Counter((t - retries[0]) // 1000 for t in retries)
    assert max(per_second.values()) <= rate + burst, per_second
    assert ledger.ledger()["total_effects"] == n
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)


@pytest.mark.parametrize(
    ("with_worker", "sleep_input", "timeout"),
    [
        (False, {"seconds": 0.1}, "schedule_to_start"),
        (True, {"seconds": 3, "heartbeat": True}, "start_to_close"),
        (True, {"seconds": 3, "heartbeat": False}, "heartbeat"),
    ],
)
def test_each_activity_timeout_fires_from_recorded_timers(
    settings, services, client, with_worker, sleep_input, timeout
):
    services.start("orchestrator")
    if with_worker:
        services.start("worker")
        # Warm up: the worker has joined its group and polls before the timed task goes
        # out, so schedule-to-start cannot fire merely because the worker was booting.
        warm = client.start("three_step", {"n": 1}, f"warm-{timeout}").workflow_id
        assert client.wait(warm, 60).status == "completed"
    wf = client.start("slow_step", sleep_input, f"slow-{timeout}").workflow_id
    done = client.wait(wf, 60)
    assert done.status == "failed"
    events = histories(settings)[wf]
    timed_out = [e.payload for e in events if isinstance(e.payload, ActivityTimedOut)]
    assert [(t.activity_id, t.attempt, t.timeout) for t in timed_out] == [
        ("run#1/sleep", 1, timeout)
    ]
    fired = [e for e in events if e.type == "TimerFired"]
    assert fired, "the timeout came from a durable timer"


def test_a_task_whose_input_fails_its_schema_is_a_permanent_failure(settings, services):
    from confluent_kafka import Producer

    from orchestrator.domain.model.messages import ActivityTask, Envelope
    from orchestrator.payload_schemas.codec import Codec

    services.start("worker")
    task = Envelope(
        message_id="poison/task",
        workflow_id="poisoned",
        run_id="r1",
        seq=0,
        type="ActivityTask",
        recorded_at=int(time.time() * 1000),
        payload=ActivityTask(
            "run#1/post", "post_to_ledger", "post", '{"invoice_id": 7}', 1, 1, "poisoned/post/1"
        ),
    )
    producer = Producer({"bootstrap.servers": settings.kafka_servers})
    producer.produce(settings.topic("activity-tasks"), key=b"poisoned", value=Codec().encode(task))
    producer.flush(10)
    codec = Codec()

    def reports():
        records = read_topic(
            settings.kafka_servers, settings.topic("commands"), settings.partitions, max_s=2
        )
        return [codec.decode(r.value()) for r in records]

    found = wait_until(reports, 60, "the worker's report")
    assert len(found) == 1
    report = found[0].payload
    assert report.failure_class == "permanent"
    assert report.error_type == "ValidationError"
    assert report.message == (
        "invalid Invoice: field 'account': Field required; field 'amount': Field required; "
        "field 'invoice_id': Input should be a valid string"
    )


def test_an_unanswerable_status_query_needs_attention_and_the_operator_resolves_it(
    settings, running, client, ledger
):
    ledger.set_faults(delay_s=3, delay_count=1)  # the answer comes after the client gave up
    wf = client.start("invoice_posting", invoice(5), "attn-1").workflow_id
    wait_until(lambda: ledger.ledger()["effects"], 30, "the posting to commit")
    ledger.set_faults(down=True)  # ...and the status query cannot reach the ledger
    wait_until(lambda: client.projection.status(wf) == "needs_attention", 60, "needs_attention")
    events = histories(settings)[wf]
    attention = [e.payload for e in events if e.type == "WorkflowNeedsAttention"]
    assert [a.activity_id for a in attention] == ["run#1/post"]
    assert [p.attempt for p in _scheduled(events, "post_to_ledger")] == [1]

    ledger.set_faults(down=False)
    key = _scheduled(events, "post_to_ledger")[0].idempotency_key
    posting = ledger.posting(key)
    found = json.dumps({"posting_id": posting["posting_id"], "key": key})
    resolved = keel(settings, "workflow", "resolve", wf, "run#1/post", "--found", found)
    assert resolved.returncode == 0, resolved.stderr
    done = client.wait(wf, 60)
    assert done.status == "completed"
    assert done.output == {"posting_id": posting["posting_id"]}
    assert ledger.ledger()["calls"] == {key: 1}, "the write was never repeated"

    again = keel(settings, "workflow", "resolve", wf, "run#1/post", "--not-found")
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"error: workflow '{wf}' is completed, not needs_attention; resolve refused"
    )
