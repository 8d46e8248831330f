"""The dead-letter queue seen by an operator: list what is there, send it out again.

Two kinds of letters live in ``keel.dlq``:

* an **activity** past its retry bounds (from an ``ActivityDeadLettered`` event): its
  workflow waits in ``needs_attention``; redrive sends ``RedriveActivity``, a new
  attempt of the same logical attempt under the same idempotency key;
* a **record** that could not be processed (undecodable, or a rejected command): redrive
  produces the original bytes to their source topic again, e.g. after a fix is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from orchestrator.codec import DecodeError, default_codec
from orchestrator.domain.messages import ActivityDeadLettered, DeadLetter, RedriveActivity
from orchestrator.errors import KeelError
from orchestrator.runtime.client import KeelClient
from orchestrator.runtime.kafka import producer_config, read_partitions
from orchestrator.settings import Settings


@dataclass
class Letter:
    id: str
    kind: str  # "activity" | "record"
    workflow_id: str
    recorded_at: int
    reason: str
    source_topic: str
    source_partition: int
    source_offset: int
    activity_id: str | None
    attempts: int | None
    value: bytes | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "workflow_id": self.workflow_id,
            "activity_id": self.activity_id,
            "attempts": self.attempts,
            "reason": self.reason,
            "recorded_at": self.recorded_at,
            "source": f"{self.source_topic}[{self.source_partition}]@{self.source_offset}",
        }


def list_letters(settings: Settings) -> list[Letter]:
    from ops.topics import admin_client

    topic = settings.topic("dlq")
    meta = admin_client(settings).list_topics(topic, timeout=settings.admin_timeout_s)
    if topic not in meta.topics or meta.topics[topic].error is not None:
        raise KeelError(f"topic {topic} does not exist; run `keel topics create`")
    codec = default_codec()
    letters = []
    partitions = dict.fromkeys(meta.topics[topic].partitions, 0)
    for msg in read_partitions(settings, topic, partitions):
        env = codec.decode(msg.value())
        d: DeadLetter = env.payload
        activity_id = attempts = None
        kind = "record"
        if d.value is not None and d.source_partition < 0:
            try:
                inner = codec.decode(d.value)
            except DecodeError:
                inner = None
            if inner is not None and isinstance(inner.payload, ActivityDeadLettered):
                kind = "activity"
                activity_id = inner.payload.activity_id
                attempts = inner.payload.attempts
        letters.append(
            Letter(
                env.message_id,
                kind,
                env.workflow_id,
                env.recorded_at,
                d.reason,
                d.source_topic,
                d.source_partition,
                d.source_offset,
                activity_id,
                attempts,
                d.value,
            )
        )
    return letters


def redrive(settings: Settings, client: KeelClient, letter_id: str) -> str:
    """Send one letter out again; returns what was done, in one line."""
    found = [x for x in list_letters(settings) if x.id == letter_id]
    if not found:
        raise KeelError(f"no dead letter with id '{letter_id}'; see `keel dlq list`")
    letter = found[-1]
    if letter.kind == "activity":
        assert letter.activity_id is not None
        client.send(letter.workflow_id, RedriveActivity(letter.activity_id))
        return f"redrive of activity '{letter.activity_id}' sent to {letter.workflow_id}"
    if letter.value is None:
        raise KeelError(f"dead letter '{letter_id}' carries no record to send again")
    producer = Producer(producer_config(settings))
    key = letter.workflow_id.encode() if letter.workflow_id else None
    producer.produce(letter.source_topic, value=letter.value, key=key)
    if producer.flush(settings.admin_timeout_s) != 0:
        raise KeelError(
            f"Kafka did not acknowledge the redriven record within {settings.admin_timeout_s:g}s"
        )
    return f"record sent again to {letter.source_topic}"
