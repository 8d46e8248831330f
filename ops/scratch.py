"""A bench run's own topic prefix, and its removal when the run is over.

Every ``keel bench`` run works under a fresh prefix (``bench-<label>-<hex>``) so runs never
see each other's records. Left behind, those prefixes pile up: each run leaves its topics
(``KEEL_PARTITIONS`` partitions each) and its Redis keys, and a broker holding a few thousand
partitions is measurably slower (docs/performance.md). So the bench drops its prefix when
it is done, unless asked to keep it (``--keep-topics``) for inspection.

Only the run's own names are touched: its topics (``<prefix>.<kind>`` for each of
``TOPIC_KINDS``, and Kafka's floor's ``<prefix>.floor-*``) and its Redis keys under
``keel:<prefix>:`` (orchestrator/io/redis/keyspace.py). Another prefix that merely starts
with this one (``<prefix>.x``) is left alone. The run's consumer
groups are left to expire with the broker's ``offsets.retention.minutes``: a statically
named orchestrator that was SIGKILLed stays a member until its session times out, and a
group with a member cannot be deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis
from confluent_kafka import KafkaError, KafkaException

from orchestrator.config.settings import TOPIC_KINDS, Settings
from orchestrator.io.kafka.topics import admin_client, create_topics
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from orchestrator.io.redis.keyspace import Keyspace

__all__ = ["Dropped", "drop", "fresh"]

#: Keys unlinked per round trip while dropping a prefix's Redis keys.
_UNLINK_BATCH = 1000


def fresh(base: Settings, log: Callable[[str], None], label: str = "") -> Settings:
    """``base`` under a new prefix of its own, with its topics created (and logged)."""
    tag = f"{label}-" if label else ""
    settings = base.model_copy(update={"topic_prefix": f"bench-{tag}{uuid.uuid4().hex[:8]}"})
    create_topics(settings)
    log(f"prefix {settings.topic_prefix}: topics created")
    return settings


@dataclass(frozen=True, slots=True)
class Dropped:
    """What :func:`drop` removed, and what it could not (each with its reason)."""

    topics: int
    keys: int
    failures: tuple[str, ...]

    def describe(self, prefix: str) -> str:
        done = f"dropped prefix {prefix}: {self.topics} topics, {self.keys} Redis keys"
        return done + (f"; not dropped: {'; '.join(self.failures)}" if self.failures else "")


def drop(settings: Settings, log: Callable[[str], None] | None = None) -> Dropped:
    """Delete every topic and Redis key of ``settings.topic_prefix``.

    Best effort: a failure is reported (in the result and the log), never raised, so a
    bench's figures are printed even when the cleanup after them fails.
    """
    prefix = settings.topic_prefix
    failures: list[str] = []
    topics = keys = 0
    try:
        topics = _drop_topics(settings, failures)
    except KafkaException as exc:
        failures.append(f"Kafka: {exc}")
    try:
        keys = _drop_redis(settings)
    except (redis.RedisError, OSError) as exc:
        failures.append(f"Redis: {exc}")
    dropped = Dropped(topics, keys, tuple(failures))
    if log is not None:
        log(dropped.describe(prefix))
    return dropped


def _drop_topics(settings: Settings, failures: list[str]) -> int:
    timeout = settings.admin_timeout_s
    admin = admin_client(settings)
    kinds = {settings.topic(kind) for kind in TOPIC_KINDS}
    floor = f"{settings.topic_prefix}.floor-"
    listed = admin.list_topics(timeout=timeout).topics
    # The prefix's own topics are asked for by name, listed or not: a broker's metadata
    # may not show a topic created a moment ago (under load), and the controller knows it.
    names = sorted(kinds | {t for t in listed if t.startswith(floor)})
    topics = 0
    futures = admin.delete_topics(names, operation_timeout=timeout, request_timeout=timeout)
    for name, future in futures.items():
        try:
            future.result(timeout=timeout + 5)
            topics += 1
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue  # never created, or gone already
            failures.append(f"topic {name}: {exc}")
        except TimeoutError as exc:
            failures.append(f"topic {name}: {exc}")
    return topics


def _drop_redis(settings: Settings) -> int:
    client = redis_client(settings.redis, RedisUse.READ_MODEL)
    try:
        removed = 0
        batch: list[str] = []
        patterns = Keyspace.for_url(settings.topic_prefix, settings.redis).patterns
        for key in (k for p in patterns for k in client.scan_iter(match=p, count=_UNLINK_BATCH)):
            batch.append(key)
            if len(batch) >= _UNLINK_BATCH:
                removed += int(client.unlink(*batch))
                batch.clear()
        if batch:
            removed += int(client.unlink(*batch))
        return removed
    finally:
        client.close()
