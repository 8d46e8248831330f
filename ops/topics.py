"""Idempotent provisioning of Keel's topics (DESIGN §3).

Commands and events must have the same partition count: partition *p* of both
belongs to one orchestrator, which is what makes it the single writer of every
workflow on it. An existing topic with another count is an error, not a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.errors import KeelError
from orchestrator.settings import TOPIC_KINDS, Settings

_quiet = logging.getLogger("keel.ops.topics.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

#: Per-kind topic configuration. The event store keeps everything forever and is
#: never compacted; snapshots keep only the newest record per workflow.
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    "commands": {"retention.ms": str(7 * 24 * 3600 * 1000)},
    "events": {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
    "snapshots": {
        "cleanup.policy": "compact",
        # Roll segments often so superseded snapshots are compacted away and
        # recovery reads little more than one record per workflow.
        "segment.ms": str(10 * 60 * 1000),
        "min.cleanable.dirty.ratio": "0.2",
    },
    "tasks": {"retention.ms": str(7 * 24 * 3600 * 1000)},
    "dlq": {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
}


class TopicError(KeelError):
    """Topics could not be provisioned; the message says why in one line."""


@dataclass
class TopicReport:
    name: str
    partitions: int
    created: bool


def admin_client(settings: Settings) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": settings.kafka_servers,
            "logger": _quiet,
            "socket.connection.setup.timeout.ms": int(min(settings.admin_timeout_s, 30) * 1000),
        }
    )


def create_topics(settings: Settings, partitions: int | None = None) -> list[TopicReport]:
    """Create the missing topics; verify the existing ones. Safe to run any number of times."""
    partitions = partitions or settings.partitions
    timeout = settings.admin_timeout_s
    admin = admin_client(settings)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise TopicError(
            f"cannot reach Kafka at {settings.kafka_servers} within {timeout:g}s "
            f"({_reason(exc)}); is it running? try `keel infra up`"
        ) from None
    existing = {name: len(t.partitions) for name, t in metadata.topics.items()}
    names = {kind: settings.topic(kind) for kind in TOPIC_KINDS}
    missing = [
        NewTopic(
            names[kind],
            num_partitions=partitions,
            replication_factor=settings.replication_factor,
            config=TOPIC_CONFIGS[kind],
        )
        for kind in TOPIC_KINDS
        if names[kind] not in existing
    ]
    created: set[str] = set()
    if missing:
        futures = admin.create_topics(missing, request_timeout=timeout, operation_timeout=timeout)
        for name, future in futures.items():
            try:
                future.result(timeout=timeout + 5)
                created.add(name)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicError(f"creating topic {name} failed: {_reason(exc)}") from None
            except TimeoutError:
                raise TopicError(f"creating topic {name} timed out after {timeout:g}s") from None
    reports = [
        TopicReport(names[k], existing.get(names[k], partitions), names[k] in created)
        for k in TOPIC_KINDS
    ]
    counts = {r.name: r.partitions for r in reports}
    if counts[names["commands"]] != counts[names["events"]]:
        raise TopicError(
            f"{names['commands']} has {counts[names['commands']]} partitions but "
            f"{names['events']} has {counts[names['events']]}; they must be equal"
        )
    return reports


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)
