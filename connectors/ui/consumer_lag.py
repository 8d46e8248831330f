"""Consumer lag of this topic prefix's consumer groups, for the web UI's health page.

An I/O adapter of the UI (like ``connectors.delivery`` of the webhooks): it alone imports
``confluent_kafka`` here. Each group named ``<prefix>.*`` is asked for its committed offsets;
every partition of each topic it commits on is compared with the partition's last stable
offset (``read_committed``: what a Keel consumer can read). A partition the group never
committed on counts from its earliest offset. On a topic written in transactions a
caught-up group may still show 1 per partition: the commit marker after the last record
takes an offset that no consumer commits past until more records arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from orchestrator.io.kafka.clients import admin_config
from orchestrator.settings import Settings

__all__ = ["TopicLag", "consumer_lag"]


@dataclass(frozen=True)
class TopicLag:
    group: str
    topic: str
    partitions: int
    committed: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


def consumer_lag(settings: Settings, timeout_s: float = 5.0) -> list[TopicLag]:
    """The lag of each (group, topic) of the prefix's groups, sorted by group and topic."""
    admin = AdminClient(admin_config(settings))
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    prefix = f"{settings.topic_prefix}."
    groups = sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix))
    committed: dict[str, dict[tuple[str, int], int]] = {}
    for group in groups:  # the admin API takes one group per request
        asked = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
        )
        found = asked[group].result(timeout=timeout_s)
        committed[group] = {
            (tp.topic, tp.partition): tp.offset for tp in found.topic_partitions or []
        }
    topics = sorted({t for offsets in committed.values() for t, _ in offsets})
    if not topics:
        return []
    metadata = admin.list_topics(timeout=timeout_s).topics
    parts = {t: sorted(metadata[t].partitions) for t in topics if t in metadata}
    every = [TopicPartition(t, p) for t, ps in parts.items() for p in ps]
    ends = _offsets(admin, every, OffsetSpec.latest(), timeout_s)
    starts = _offsets(admin, every, OffsetSpec.earliest(), timeout_s)
    out = []
    for group, offsets in committed.items():
        for topic in sorted({t for t, _ in offsets}):
            done = [
                offsets[(topic, p)] if offsets.get((topic, p), -1) >= 0 else starts[(topic, p)]
                for p in parts.get(topic, [])
            ]
            end = sum(ends[(topic, p)] for p in parts.get(topic, []))
            out.append(TopicLag(group, topic, len(done), sum(done), end))
    return out


def _offsets(
    admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec, timeout_s: float
) -> dict[tuple[str, int], int]:
    futures = admin.list_offsets(
        {tp: spec for tp in tps},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=timeout_s,
    )
    return {
        (tp.topic, tp.partition): f.result(timeout=timeout_s).offset for tp, f in futures.items()
    }
