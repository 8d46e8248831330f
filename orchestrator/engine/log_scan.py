"""Reading a whole topic to rebuild state, record by record as plain tuples.

A rebuild reads every snapshot record and every event of the tail; building a
``ports.Record`` per message costs more than what the rebuild does with most snapshot
records, so both readers here take the log's raw batches (``EventLog.read_batches``: on
Kafka the consumer's own messages, untouched) and touch each message once. Measured in
git show 6f66b40:docs/performance.md, "Recovery".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.io.ports import EventLog, RawMessage

__all__ = ["RunGroups", "ScannedRecord", "TailRecords", "group_runs", "header_value", "scan"]

#: ``(partition, offset, key, value, headers)``
ScannedRecord = tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]

#: Messages fetched per call: larger batches cost less per record.
_BATCH = 10_000

#: A record's headers as read: ``(name, value)`` pairs.
Headers = Sequence[tuple[str, bytes | None]]
#: A run's records as a rebuild read them: ``(event type, value)`` in log order (the
#: type from the type header, None without one).
TailRecords = list[tuple[str | None, bytes | None]]


@dataclass(slots=True)
class RunGroups:
    """A topic's records grouped by key (a run), per partition, in log order."""

    #: Each run's records.
    records: dict[int, dict[bytes, TailRecords]]
    #: Each run's first offset.
    firsts: dict[int, dict[bytes, int]]
    #: Each run's last record's headers.
    lasts: dict[int, dict[bytes, Headers]]
    #: Each partition's offset after its last record (its start when it had none).
    ends: dict[int, int]
    count: int = 0
    #: One ``str`` per distinct type header, shared by every record of that type.
    kinds: dict[bytes, str] = field(default_factory=dict)

    @classmethod
    def empty(cls, starts: Mapping[int, int]) -> RunGroups:
        return cls(
            {p: {} for p in starts}, {p: {} for p in starts}, {p: {} for p in starts}, dict(starts)
        )

    def kind(self, raw: bytes | None) -> str | None:
        if raw is None:
            return None
        kind = self.kinds.get(raw)
        if kind is None:
            kind = self.kinds.setdefault(raw, raw.decode("utf-8", "replace"))
        return kind


def group_runs(
    log: EventLog,
    topic: str,
    starts: Mapping[int, int],
    stop: Callable[[], bool] | None,
    type_header: str,
) -> RunGroups:
    """Every committed record of the partitions from their start offsets, grouped by run.

    The rebuild's hot loop (on Kafka several hundred thousand records a second): it takes
    the log's batches whole and touches each message once, with no generator or tuple
    per record between them.
    """
    groups = RunGroups.empty(starts)
    kinds = groups.kinds
    current = -1
    runs: dict[bytes, TailRecords] = {}
    first: dict[bytes, int] = {}
    last: dict[bytes, Headers] = {}
    prev: RawMessage | None = None  # the last message read: a partition's end is one past it
    for batch in log.read_batches(topic, starts, stop=stop, batch=_BATCH):
        groups.count += len(batch)
        for m in batch:
            p = m.partition() or 0
            if p != current:  # records come in runs of one partition: look its maps up once
                if prev is not None:
                    groups.ends[current] = (prev.offset() or 0) + 1
                current, runs, first, last = p, groups.records[p], groups.firsts[p], groups.lasts[p]
            hs = m.headers() or ()
            # Keel writes the type header first; a record from elsewhere is searched.
            raw = hs[0][1] if hs and hs[0][0] == type_header else header_value(hs, type_header)
            kind = kinds.get(raw)  # type: ignore[arg-type]  # None: no type header
            if kind is None and raw is not None:
                kind = groups.kind(raw)
            key = m.key() or b""
            records = runs.get(key)
            if records is None:
                runs[key] = [(kind, m.value())]
                first[key] = m.offset() or 0
            else:
                records.append((kind, m.value()))
            last[key] = hs
            prev = m
    if prev is not None:
        groups.ends[current] = (prev.offset() or 0) + 1
    return groups


def scan(
    log: EventLog, topic: str, starts: Mapping[int, int], stop: Callable[[], bool] | None
) -> Iterator[ScannedRecord]:
    """Every committed record of the partitions from their start offsets to the end."""
    for batch in log.read_batches(topic, starts, stop=stop, batch=_BATCH):
        for m in batch:
            yield m.partition() or 0, m.offset() or 0, m.key(), m.value(), m.headers() or ()


def header_value(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The value of the first header ``name`` (the one Keel writes comes first)."""
    if headers and headers[0][0] == name:
        return headers[0][1]
    return next((v for k, v in headers if k == name), None)
