"""The dead-letter topic on Kafka, for ``keel dlq``: read every record of ``<prefix>.dlq``,
and write a closing (the redriven records and their markers) in one transaction
(orchestrator/client/dead_letters.py says what a letter is and when it closes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.io.kafka.clients import ClientMessage, read_partitions, transactional_producer

__all__ = ["OutRecord", "TransactionNotCommitted", "read_topic_records", "write_in_one_transaction"]


class TransactionNotCommitted(UnavailableError):
    """The transaction did not commit: none of its records was written."""


@dataclass(frozen=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def read_topic_records(settings: Settings, topic: str) -> list[ClientMessage]:
    """Every record of ``topic`` (all partitions, from the start to the end now)."""
    from orchestrator.io.kafka.topics import require_topic

    partitions = dict.fromkeys(require_topic(settings, topic).partitions, 0)
    return list(read_partitions(settings, topic, partitions))


def write_in_one_transaction(
    settings: Settings, transactional_id: str, records: Sequence[OutRecord]
) -> None:
    """All of ``records`` or none (:class:`TransactionNotCommitted`, naming Kafka's reason)."""
    producer = transactional_producer(settings, transactional_id)
    timeout = settings.admin_timeout_s
    try:
        producer.begin_transaction()
        for r in records:
            producer.produce(r.topic, key=r.key, value=r.value, headers=list(r.headers))
        producer.commit_transaction(timeout)
    except KafkaException as exc:
        with contextlib.suppress(KafkaException):
            producer.abort_transaction(timeout)
        raise TransactionNotCommitted(str(exc.args[0])) from None
