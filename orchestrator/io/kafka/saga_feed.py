"""The saga manager on Kafka: its consumer of workflow events and saga facts, and its
transactional log (docs/sagas.md).

The manager reads ``<prefix>.events`` and its own ``<prefix>.sagas`` in one consumer group
and writes facts and commands in one transaction with the consumed offsets, so a fact is
routed and a command emitted once. After any change of assignment it folds its state again
from the committed offsets (``rewind``); this module keeps every call of the Kafka client
here, so the manager is a process over an adapter like the others.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from orchestrator.config.settings import Settings
from orchestrator.io.kafka.adapter import KafkaEventLog
from orchestrator.io.kafka.clients import ClientMessage, consumer_config, next_offsets, poll_records

__all__ = ["SagaFeed", "SagaLog"]


class SagaFeed:
    """The manager's consumer: records in, a flag when the assignment changed."""

    def __init__(self, settings: Settings, topics: list[str]) -> None:
        self.consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}.sagas"))
        #: Set when partitions were assigned, revoked or lost: the state must be folded again.
        self.changed = False
        self.consumer.subscribe(
            topics, on_assign=self._moved, on_revoke=self._moved, on_lost=self._moved
        )

    def _moved(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        self.changed = True

    def poll(self, max_records: int, timeout_s: float) -> list[ClientMessage]:
        return poll_records(self.consumer, max_records, timeout_s)

    def rewind(self) -> dict[str, dict[int, int]]:
        """Seek every owned partition back to its committed offset; those offsets (the ends
        of what is already decided), per topic and partition. Clears ``changed``."""
        self.changed = False
        owned = self.consumer.assignment()
        ends: dict[str, dict[int, int]] = {}
        if not owned:
            return ends
        for tp in self.consumer.committed(owned, timeout=60):
            ends.setdefault(tp.topic, {})[tp.partition] = max(tp.offset, 0)
            start = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, start))
        return ends

    def group_metadata(self) -> Any:
        return self.consumer.consumer_group_metadata()

    def close(self) -> None:
        self.consumer.close()


class SagaLog(KafkaEventLog):
    """The transactional producer; commits the offsets of both topics it consumed."""

    def commit_batch(self, records: list[ClientMessage], feed: SagaFeed) -> None:
        self.send_offsets(next_offsets(records), feed.group_metadata())
        self.commit_open()
