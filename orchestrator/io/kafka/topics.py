"""Keel's topics, for the Kafka adapter: idempotent provisioning (``keel topics create``), the
check a service makes that its topic exists, and the admin client (docs/local-infra.md,
docs/operations.md).

Commands and events must have the same partition count: partition *p* of both
belongs to one orchestrator, which is what makes it the single writer of every
workflow on it. An existing topic with another count is an error, not a warning.

Replication follows the cluster unless ``KEEL_REPLICATION_FACTOR`` is set: three
replicas when there are three brokers or more, and ``min.insync.replicas`` set on
each topic (not left to a broker default) so that an acknowledged write (acks=all)
is on a majority of replicas and survives the loss of any one broker.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, TopicMetadata

from orchestrator.config.settings import TOPIC_KINDS, Settings
from orchestrator.domain.model.errors import KeelError
from orchestrator.io.kafka.clients import admin_config

_quiet = logging.getLogger("keel.topics.librdkafka")
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
    "activity-tasks": {"retention.ms": str(7 * 24 * 3600 * 1000)},
    "dlq": {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
    # the saga manager's facts: its instances are folded from them, so kept like the events
    "sagas": {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
}


class TopicError(KeelError):
    """Topics could not be provisioned; the message says why in one line."""


#: Replicas Keel gives a topic by default: enough to lose one broker and keep a majority.
DEFAULT_REPLICAS = 3


@dataclass
class TopicReport:
    name: str
    partitions: int
    created: bool
    replication_factor: int = 0
    min_insync_replicas: int | None = None


def replication_for(settings: Settings, brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for new topics on a ``brokers``-broker cluster.

    ``KEEL_REPLICATION_FACTOR`` wins when set; otherwise min(3, brokers). The minimum
    in-sync count is a majority of the replicas from three on (2 of 3): acks=all then
    means "on a majority", one broker may be lost without refusing writes, and an
    acknowledged record is never only on the broker that died. Below three replicas
    it is 1, because 2 of 2 would stop every write when either broker is away.
    """
    explicit = "replication_factor" in settings.model_fields_set
    rf = settings.replication_factor if explicit else max(1, min(DEFAULT_REPLICAS, brokers))
    return rf, (rf // 2 + 1 if rf >= 3 else 1)


def local_bootstrap_servers(settings: Settings) -> str:
    """The Kafka servers an admin client should use: the configured ones, else every broker
    of the local stack recorded under KEEL_HOME (all of a cluster's, not only the first),
    else the first local port. Read afresh on each call (``keel dev`` records the stack
    after its settings were loaded).
    """
    if settings.bootstrap_servers:
        return settings.bootstrap_servers
    try:
        recorded = json.loads((settings.home / "stack.json").read_text())
    except (OSError, ValueError):
        recorded = None
    servers = recorded.get("bootstrap_servers") if isinstance(recorded, dict) else None
    return servers if isinstance(servers, str) and servers else settings.kafka_servers


def admin_client(settings: Settings) -> AdminClient:
    config: dict[str, Any] = admin_config(
        settings,
        **{
            "bootstrap.servers": local_bootstrap_servers(settings),
            "logger": _quiet,
            "socket.connection.setup.timeout.ms": int(min(settings.admin_timeout_s, 30) * 1000),
        },
    )
    return AdminClient(config)


def require_topic(settings: Settings, name: str) -> TopicMetadata:
    """The metadata of topic ``name``; a ``TopicError`` that says how to make it when the
    topic is missing. Services never create topics themselves: ``keel topics create``
    gives every topic one replication policy."""
    meta = admin_client(settings).list_topics(name, timeout=settings.admin_timeout_s)
    found = meta.topics.get(name)
    if found is None or found.error is not None:
        raise TopicError(f"topic {name} does not exist; run `keel topics create`")
    return found


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
    replicas = {
        name: len(t.partitions[0].replicas) if 0 in t.partitions else 0
        for name, t in metadata.topics.items()
    }
    rf, min_isr = replication_for(settings, len(metadata.brokers))
    names = {kind: settings.topic(kind) for kind in TOPIC_KINDS}
    missing = [
        NewTopic(
            names[kind],
            num_partitions=partitions,
            replication_factor=rf,
            config={**TOPIC_CONFIGS[kind], "min.insync.replicas": str(min_isr)},
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
    isr = _min_insync(admin, [n for n in names.values() if n not in created], timeout)
    reports = [
        TopicReport(
            names[k],
            existing.get(names[k], partitions),
            names[k] in created,
            rf if names[k] in created else replicas.get(names[k], 0),
            min_isr if names[k] in created else isr.get(names[k]),
        )
        for k in TOPIC_KINDS
    ]
    counts = {r.name: r.partitions for r in reports}
    if counts[names["commands"]] != counts[names["events"]]:
        raise TopicError(
            f"{names['commands']} has {counts[names['commands']]} partitions but "
            f"{names['events']} has {counts[names['events']]}; they must be equal"
        )
    return reports


def _min_insync(admin: AdminClient, topics: list[str], timeout: float) -> dict[str, int]:
    """The effective ``min.insync.replicas`` of existing topics (best effort: for the report)."""
    if not topics:
        return {}
    found: dict[str, int] = {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            entry = future.result(timeout=timeout + 5).get("min.insync.replicas")
        except (KafkaException, TimeoutError):
            continue
        if entry is not None and entry.value is not None:
            found[resource.name] = int(entry.value)
    return found


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)
