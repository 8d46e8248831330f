"""Reading a whole topic to rebuild state, record by record as plain tuples.

A rebuild reads every snapshot record and every event of the tail; on the Kafka
adapter, building a ``ports.Record`` per message costs more than what the rebuild does
with most snapshot records, so there the messages are read directly through the same
reader ``EventLog.read`` uses (``kafka.read_partitions``); any other log (the in-memory
one of the unit tests) is read through ``EventLog.read``. See docs/performance.md
("Recovery").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from orchestrator.runtime.ports import EventLog

__all__ = ["ScannedRecord", "header_value", "scan"]

#: ``(partition, offset, key, value, headers)``
ScannedRecord = tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]

#: Messages fetched per call: larger batches cost less per record.
_BATCH = 10_000


def scan(
    log: EventLog, topic: str, starts: Mapping[int, int], stop: Callable[[], bool] | None
) -> Iterator[ScannedRecord]:
    """Every committed record of the partitions from their start offsets to the end."""
    from orchestrator.runtime.kafka_adapter import KafkaEventLog

    if isinstance(log, KafkaEventLog):
        from orchestrator.runtime.kafka import read_partitions

        for m in read_partitions(log.settings, topic, dict(starts), stop=stop, batch=_BATCH):
            hs: Any = m.headers() or ()  # consumed headers: a list of (str, bytes | None)
            if isinstance(hs, dict):
                hs = list(hs.items())
            yield m.partition() or 0, m.offset() or 0, m.key(), m.value(), hs
        return
    for r in log.read(topic, starts, stop):
        yield r.partition, r.offset, r.key, r.value, r.headers


def header_value(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The value of the first header ``name`` (the one Keel writes comes first)."""
    if headers and headers[0][0] == name:
        return headers[0][1]
    return next((v for k, v in headers if k == name), None)
