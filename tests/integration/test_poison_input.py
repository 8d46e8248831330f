"""One bad record never stops the engine: poison produced raw to the real commands topic.

Each input below once put the orchestrator into a crash loop (or opened a second copy
of a run on the wrong partition). Now each becomes a dead letter with its reason, and
a normal workflow started afterwards completes on the same, still running, process.
"""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Producer

from orchestrator.domain.model.messages import Envelope, SignalWorkflow, StartWorkflow
from orchestrator.io.partitioning import partition_for
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import MAX_RECORD_BYTES, now_ms
from tests.support import decode_all, histories, read_topic, wait_until

codec = Codec()


def _command(wf: str, payload) -> bytes:
    env: Envelope = Envelope(
        message_id=uuid.uuid4().hex,
        workflow_id=wf,
        run_id="",
        seq=0,
        type=type(payload).__name__,
        recorded_at=now_ms(),
        payload=payload,
    )
    return codec.encode(env)


def test_every_poison_input_is_dead_lettered_and_the_engine_keeps_moving(
    settings, services, client
):
    n = settings.partitions
    orch = services.start("orchestrator")
    services.start("worker")
    raw = Producer(
        {
            "bootstrap.servers": settings.kafka_servers,
            "message.max.bytes": 2_000_000,
            "linger.ms": 0,
        }
    )
    topic = settings.topic("commands")

    def home(wf: str) -> int:
        return partition_for(wf.encode(), n)

    start = StartWorkflow("three_step", None, '{"n": 1}')
    # 1. a null value
    raw.produce(topic, key=b"p-null", value=None, partition=home("p-null"))
    # 2. a key that differs from the envelope's workflow id
    raw.produce(topic, key=b"p-other", value=_command("p-key", start), partition=home("p-other"))
    # 3. no key at all
    raw.produce(topic, value=_command("p-nokey", start), partition=home("p-nokey"))
    # 4. the right key on the wrong partition
    wrong = (home("p-part") + 1) % n
    raw.produce(topic, key=b"p-part", value=_command("p-part", start), partition=wrong)
    # 5. ~999,900 bytes of garbage
    raw.produce(topic, key=b"p-garbage", value=b"\x00" * 999_900, partition=home("p-garbage"))
    # 6. a start with a ~999,800-byte input, bypassing the client's checks
    huge = StartWorkflow("document_review", None, json.dumps({"document": "x" * 999_780}))
    raw.produce(topic, key=b"p-huge", value=_command("p-huge", huge), partition=home("p-huge"))
    # 7. a signal whose payload nests 100k deep
    deep = SignalWorkflow("documents_added", "[" * 100_000 + "]" * 100_000)
    raw.produce(topic, key=b"p-deep", value=_command("p-deep", deep), partition=home("p-deep"))
    # 8. a start whose input holds a 4,000-digit integer
    digits = StartWorkflow("three_step", None, '{"n": ' + "9" * 4000 + "}")
    raw.produce(topic, key=b"p-int", value=_command("p-int", digits), partition=home("p-int"))
    # 9. an invalid workflow id (reserved leading underscore)
    raw.produce(topic, key=b"_p-id", value=_command("_p-id", start), partition=home("_p-id"))
    assert raw.flush(30) == 0

    wf = client.start("three_step", {"n": 2}, "after-the-poison").workflow_id
    assert client.wait(wf, 90).status == "completed"
    assert orch.poll() is None, "the orchestrator must still be running"

    expected = {
        "p-null": "record has no value (null)",
        "p-key": "record key 'p-other' differs from the envelope's workflow id 'p-key'",
        "p-nokey": "record has no key; a command's key must be its workflow id",
        "p-part": (
            f"record arrived on partition {wrong}, but workflow 'p-part' belongs on "
            f"partition {home('p-part')}"
        ),
        "p-garbage": "undecodable record: bad marker: expected c301, got 0000",
        "p-huge": "the workflow input is 999,",
        "p-deep": "signal 'documents_added' payload nests deeper than 64 levels",
        "p-int": "the workflow input holds an integer of 4000 digits; the limit is 64",
        "_p-id": "invalid workflow id '_p-id'",
    }
    records = wait_until(
        lambda: (
            r
            if len(r := read_topic(settings.kafka_servers, settings.topic("dlq"), n))
            >= len(expected)
            else None
        ),
        60,
        "every dead letter",
    )
    for r in records:
        assert len(r.value()) <= MAX_RECORD_BYTES
    letters = {e.workflow_id: e.payload for e in decode_all(records)}
    assert sorted(letters) == sorted(expected)
    for wf_id, reason in expected.items():
        assert letters[wf_id].reason.startswith(reason), (wf_id, letters[wf_id].reason)
    assert "(value truncated from 999,900 bytes)" in letters["p-garbage"].reason
    assert letters["p-garbage"].source_topic == topic
    # nothing of the poison reached the event log: no second copy of any run
    assert set(histories(settings)) == {"after-the-poison"}
