"""Poison on the real tasks topic: each gets a clear permanent failure or a dead letter,
the worker stays up, and a normal workflow still completes afterwards."""

from __future__ import annotations

import json

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES
from orchestrator.domain.model.messages import Envelope, FailActivity, StartWorkflow
from orchestrator.payload_schemas.codec import Codec
from tests.integration import worker_app
from tests.integration.worker_app import APP
from tests.support import (
    Services,
    decode_all,
    produce,
    read_topic,
    reports,
    task_envelope,
    wait_until,
)

LIMIT = f"the limit is {MAX_PAYLOAD_BYTES:,} bytes (store large documents elsewhere and pass a reference)"


def test_poison_tasks_never_stop_the_worker(settings, tmp_path):
    codec = Codec()
    svc = Services(settings, tmp_path)
    client = KeelClient(settings, worker_app.app)
    try:
        svc.start("orchestrator", "--app", APP)
        worker = svc.start("worker", "--app", APP)

        big_input = json.dumps({"n": 1, "pad": "x" * 990_000})
        deep_input = "[" * 100_000 + "]" * 100_000
        failing = {  # workflow id -> (task, the FailActivity message expected)
            "near-1mb-input": (
                task_envelope("near-1mb-input", "add_one", big_input),
                f"input of activity 'add_one' is {len(big_input):,} bytes; {LIMIT}",
            ),
            "deep-input": (
                task_envelope("deep-input", "add_one", deep_input),
                "input of activity 'add_one' nests deeper than 64 levels of arrays and objects",
            ),
            "huge-result": (
                task_envelope("huge-result", "huge_result", '{"bytes": 300000}'),
                "result of activity 'huge_result' refused after the handler returned: "
                f"the result is 300,012 bytes; {LIMIT}",
            ),
            "huge-int-result": (
                task_envelope("huge-int-result", "square", json.dumps({"n": 10**59})),
                "result of activity 'square' refused after the handler returned: "
                "the result holds an integer of 119 digits; the limit is 64",
            ),
        }
        not_a_task: Envelope = Envelope(
            "start/1", "not-a-task", "", 0, "StartWorkflow", 1, StartWorkflow("three_step", 1, "{}")
        )
        huge_id = "w" * 520_000  # a hostile producer's id: the report would be > 1 MB
        unreportable = task_envelope(huge_id, "add_one", '{"n": 1}', message_id="big/1")
        unreportable = Envelope(**_with_key(unreportable))
        garbage = b"x" * 999_900
        produce(
            settings,
            "activity-tasks",
            [
                (b"null-task", None),
                (b"garbage", garbage),
                (b"not-a-task", codec.encode(not_a_task)),
                (None, codec.encode(unreportable)),
                *[(wf.encode(), codec.encode(task)) for wf, (task, _) in failing.items()],
            ],
        )

        wf = client.start("three_step", {"n": 2}, "after-poison").workflow_id
        assert client.wait(wf, 90).status == "completed"
        assert worker.poll() is None, "the worker is alive"

        for wf_id, (_, message) in failing.items():
            [report] = wait_until(lambda w=wf_id: reports(settings, w), 30, f"{wf_id}'s report")
            fail = report.payload
            assert isinstance(fail, FailActivity), wf_id
            assert fail.failure_class == "permanent", wf_id
            assert fail.message == message

        letters = wait_until(
            lambda: (
                [
                    x
                    for x in _dead_letters(settings)
                    if x.payload.source_topic == settings.topic("activity-tasks")
                ]
                or None
            ),
            30,
            "the dead letters",
        )
        by_wf = {x.workflow_id: x.payload for x in letters}
        # a letter's key and workflow id are cut to 1,024 characters (envelopes.py)
        cut = "w" * 1023 + "…"
        assert set(by_wf) == {"null-task", "garbage", "not-a-task", cut}
        assert by_wf["null-task"].reason == "task record has no value (null)"
        assert by_wf["null-task"].value is None
        source = f"{settings.topic('activity-tasks')}[{by_wf['garbage'].source_partition}]"
        assert by_wf["garbage"].reason == (
            "undecodable task: bad marker: expected c301, got 7878 [the 999,900-byte record is "
            f"too large to keep here; it stays at {source}@{by_wf['garbage'].source_offset}]"
        )
        assert by_wf["garbage"].value is None
        assert by_wf["not-a-task"].reason == "StartWorkflow is not an activity task"
        assert codec.decode(by_wf["not-a-task"].value) == not_a_task
        assert by_wf[cut].reason.startswith(
            "the report of this task could not be produced: CompleteActivity of "
        )
        assert by_wf[cut].reason.endswith(" bytes is over the 1,000,000-byte record limit")
        assert codec.decode(by_wf[cut].value).workflow_id == huge_id
    finally:
        svc.stop_all()
        client.close()


def _with_key(env: Envelope) -> dict:
    """The envelope's fields with a short idempotency key (so the task itself fits)."""
    import dataclasses

    fields = {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}
    fields["payload"] = dataclasses.replace(env.payload, idempotency_key="k")
    return fields


def _dead_letters(settings) -> list:
    records = read_topic(
        settings.kafka_servers, settings.topic("dlq"), settings.partitions, max_s=2
    )
    return decode_all(records)
