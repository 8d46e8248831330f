"""``keel topics create`` for the operator tools and the tests: a view of the product's own.

Provisioning Keel's topics, the admin client and the check a service makes that its topic
exists belong to the Kafka adapter (``orchestrator/runtime/topics.py``), because the
projector, the dead-letter tools and the saga manager need them and the product never
imports ``ops``. The dev stack, the benchmarks, the demo and the tests import them here or
there alike.
"""

from __future__ import annotations

from orchestrator.runtime.topics import (
    DEFAULT_REPLICAS,
    TOPIC_CONFIGS,
    TopicError,
    TopicReport,
    admin_client,
    create_topics,
    replication_for,
    require_topic,
)

__all__ = [
    "DEFAULT_REPLICAS",
    "TOPIC_CONFIGS",
    "TopicError",
    "TopicReport",
    "admin_client",
    "create_topics",
    "replication_for",
    "require_topic",
]
