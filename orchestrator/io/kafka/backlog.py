"""Consumer lag: how many records each consumer group of a topic prefix has not committed.

For the ``keel_consumer_lag`` gauge (docs/metrics.md), read on scrape through a short
cache. Every group named ``<prefix>.*`` is asked for its committed offsets (the admin API
takes one group per request) and each partition it committed on for its last stable
offset (``read_committed``: transaction markers and aborted records are not backlog).
A partition a group never committed on is not counted: the group has not read it yet.
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from orchestrator.config.settings import Settings
from orchestrator.io.kafka.topics import admin_client

__all__ = ["consumer_lag"]


def consumer_lag(settings: Settings, timeout_s: float = 5.0) -> dict[tuple[str, str], int]:
    """``(topic, group) -> records`` not yet committed, for the prefix's groups."""
    admin = admin_client(settings)
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    prefix = f"{settings.topic_prefix}."
    committed: dict[str, list[TopicPartition]] = {}
    for group in sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix)):
        asked = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
        )
        found = asked[group].result(timeout=timeout_s)
        committed[group] = [tp for tp in found.topic_partitions or [] if tp.offset >= 0]
    wanted = {(tp.topic, tp.partition) for tps in committed.values() for tp in tps}
    if not wanted:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.latest() for t, p in wanted},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=timeout_s,
    )
    ends = {
        (tp.topic, tp.partition): f.result(timeout=timeout_s).offset for tp, f in futures.items()
    }
    lag: dict[tuple[str, str], int] = {}
    for group, tps in committed.items():
        for tp in tps:
            behind = max(0, ends.get((tp.topic, tp.partition), tp.offset) - tp.offset)
            lag[(tp.topic, group)] = lag.get((tp.topic, group), 0) + behind
    return lag
