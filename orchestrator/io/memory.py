"""An in-memory adapter of the runtime ports, for fast unit tests of the orchestrator loop,
the worker and the projector.

Not a product path: every process uses ``kafka_adapter``. It keeps what the loop relies
on and the contract suite checks on both adapters: transactions whose records and
intake offsets become visible together or not at all, committed offsets a rewind goes
back to, delivery reports with real offsets, a recreate that fences the old writer,
records refused past the broker's size limit; for the worker and the projector, group
offsets committed apart from any transaction, records delivered (or failed) at flush,
and a read model that refuses writes while a rebuild runs. Faults can be injected per
call name (``MemoryBroker.inject``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.model.state import WorkflowState
from orchestrator.io.partitioning import partition_for
from orchestrator.io.ports import (
    BrokerErrorKind,
    DeliveryCallback,
    DeliveryError,
    EpochChanged,
    FailureCallback,
    ProducerReset,
    RawMessage,
    RebuildRunning,
    Record,
    RecordRefused,
    SeqConflict,
    TxnAbortable,
)

__all__ = [
    "MemoryBroker",
    "MemoryCommandIntake",
    "MemoryEventLog",
    "MemoryGroupIntake",
    "MemoryOutcomeSink",
    "MemoryReadModel",
]

#: librdkafka's default ``message.max.bytes``: a larger record is refused by produce().
BROKER_MAX_RECORD = 1_000_000
#: ``str(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))``: the client's words for that refusal
#: (written out, so this adapter loads no Kafka client).
MSG_SIZE_TOO_LARGE = (
    'KafkaError{code=MSG_SIZE_TOO_LARGE,val=10,str="Broker: Message size too large"}'
)


_FATAL = BrokerErrorKind.FATAL


@dataclass
class MemoryBroker:
    partitions: int = 4
    topics: dict[str, list[list[Record]]] = field(default_factory=dict)
    #: (group, topic, partition) -> next offset to read.
    committed: dict[tuple[str, str, int], int] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)
    #: call name -> exceptions to raise on its next calls, in order.
    faults: dict[str, list[BaseException]] = field(default_factory=dict)
    #: How the Kafka adapter would sort an injected delivery failure: a test that injects
    #: a client's own exception passes ``broker_errors.classify``; by default none is
    #: retriable (this adapter loads no Kafka client, so it cannot ask one).
    classify: Callable[[BaseException], BrokerErrorKind] = field(default=lambda _: _FATAL)

    def log(self, topic: str) -> list[list[Record]]:
        if topic not in self.topics:
            self.topics[topic] = [[] for _ in range(self.partitions)]
        return self.topics[topic]

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> Record:
        """Append one record outside any transaction (as a client or a raw producer does)."""
        if partition is None:
            partition = partition_for(key, self.partitions) if key is not None else 0
        part = self.log(topic)[partition]
        rec = Record(topic, partition, len(part), key, value, tuple(headers))
        part.append(rec)
        return rec

    def records(self, topic: str) -> list[Record]:
        return [r for part in self.log(topic) for r in part]

    def inject(self, call: str, exc: BaseException, times: int = 1) -> None:
        self.faults.setdefault(call, []).extend([exc] * times)

    def fault(self, call: str) -> None:
        pending = self.faults.get(call)
        if pending:
            raise pending.pop(0)


class MemoryCommandIntake:
    """One group member that owns every partition of the topic (or those it is given)."""

    def __init__(self, broker: MemoryBroker, topic: str, group_id: str) -> None:
        self.broker = broker
        self.topic = topic
        self.group_id = group_id
        self.positions: dict[int, int] = {}
        #: Partitions paused (``EventFeed.pause``): polled for nothing until resumed.
        self.paused: set[int] = set()
        self._on_assign: Callable[[list[int]], None] | None = None
        self._on_revoke: Callable[[list[int]], None] | None = None
        self._pending: list[int] | None = None

    def subscribe(
        self,
        on_assign: Callable[[list[int]], None],
        on_revoke: Callable[[list[int]], None],
    ) -> None:
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._pending = list(range(self.broker.partitions))

    def assign(self, partitions: list[int]) -> None:
        """Rebalance to ``partitions`` at the next poll (a test's way to move ownership)."""
        self._pending = sorted(partitions)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        if self._pending is not None:
            gone = sorted(set(self.positions) - set(self._pending))
            if gone and self._on_revoke:
                self._on_revoke(gone)
            new = [p for p in self._pending if p not in self.positions]
            self.positions = {p: self.positions.get(p, 0) for p in self._pending}
            self._seek_committed(new)
            self._pending = None
            if new and self._on_assign:
                self._on_assign(new)
        out: list[Record] = []
        log = self.broker.log(self.topic)
        for p, pos in self.positions.items():
            if p in self.paused:
                continue
            take = log[p][pos : pos + max_records - len(out)]
            out.extend(take)
            self.positions[p] = pos + len(take)
            if len(out) >= max_records:
                break
        return out

    def rewind(self, partition: int, offset: int) -> None:
        self.positions[partition] = offset

    def rewind_to_committed(self, partitions: Sequence[int]) -> None:
        self.broker.fault("rewind_to_committed")
        self._seek_committed(partitions)

    def _seek_committed(self, partitions: Sequence[int]) -> None:
        for p in partitions:
            self.positions[p] = self.broker.committed.get((self.group_id, self.topic, p), 0)

    def partition_count(self) -> int:
        return self.broker.partitions

    def close(self) -> None:
        self.positions = {}


class MemoryEventLog:
    """A transactional writer: staged records become visible at commit, with the offsets."""

    def __init__(
        self,
        broker: MemoryBroker,
        transactional_id: str,
        intake: MemoryCommandIntake | None = None,
    ) -> None:
        self.broker = broker
        self.transactional_id = transactional_id
        self.intake = intake
        self.epoch = self._init()
        self._staged: list[
            tuple[str, bytes, bytes | None, int | None, tuple, DeliveryCallback | None]
        ] = []
        self._open = False

    def _init(self) -> int:
        epoch = self.broker.epochs.get(self.transactional_id, 0) + 1
        self.broker.epochs[self.transactional_id] = epoch
        return epoch

    def _check_epoch(self, what: str) -> None:
        if self.broker.epochs.get(self.transactional_id) != self.epoch:
            raise ProducerReset(f"{what}: producer fenced by a newer epoch")

    def begin(self) -> None:
        self.broker.fault("begin")
        self._check_epoch("begin_transaction")
        if self._open:
            raise ProducerReset("begin_transaction: a transaction is already open")
        self._open = True
        self._staged = []

    def append(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        on_delivered: DeliveryCallback | None = None,
    ) -> None:
        if not self._open:
            raise ProducerReset("produce outside a transaction")
        if len(value) + len(key or b"") > BROKER_MAX_RECORD:
            raise TxnAbortable(f"produce: {MSG_SIZE_TOO_LARGE}")
        self.broker.fault("append")
        self._staged.append((topic, value, key, partition, tuple(headers), on_delivered))

    def commit(self, offsets: Mapping[int, int]) -> None:
        if not self._open:
            raise ProducerReset("commit_transaction without a transaction")
        self.broker.fault("commit")
        self._check_epoch("commit_transaction")
        for topic, value, key, partition, headers, cb in self._staged:
            rec = self.broker.produce(topic, value, key, partition=partition, headers=headers)
            if cb is not None:
                cb(rec.partition, rec.offset)
        if offsets:
            assert self.intake is not None
            for p, o in offsets.items():
                self.broker.committed[(self.intake.group_id, self.intake.topic, p)] = o
        self._staged = []
        self._open = False

    def abort(self) -> None:
        self.broker.fault("abort")
        self._staged = []
        self._open = False

    def flush(self) -> None:
        return None

    def open(self) -> None:
        """Its epoch was taken when it was made (``_init``): nothing more to fence."""
        self.broker.fault("open")

    def recreate(self) -> None:
        self.broker.fault("recreate")
        self.epoch = self._init()
        self._staged = []
        self._open = False

    def read(
        self, topic: str, starts: Mapping[int, int], stop: Callable[[], bool] | None = None
    ) -> Iterator[Record]:
        log = self.broker.log(topic)
        for p, start in sorted(starts.items()):
            yield from list(log[p][start:])

    def read_batches(
        self,
        topic: str,
        starts: Mapping[int, int],
        stop: Callable[[], bool] | None = None,
        batch: int = 10_000,
    ) -> Iterator[Sequence[RawMessage]]:
        log = self.broker.log(topic)
        for p, start in sorted(starts.items()):
            records = log[p][start:]
            for i in range(0, len(records), batch):
                yield [_Message(r) for r in records[i : i + batch]]

    def close(self) -> None:
        self._open = False


class _Message:
    """A stored record as ``EventLog.read_batches`` hands it over (``ports.RawMessage``)."""

    __slots__ = ("_record",)

    def __init__(self, record: Record) -> None:
        self._record = record

    def partition(self) -> int:
        return self._record.partition

    def offset(self) -> int:
        return self._record.offset

    def key(self) -> bytes | None:
        return self._record.key

    def value(self) -> bytes | None:
        return self._record.value

    def headers(self) -> tuple[tuple[str, bytes], ...]:
        return self._record.headers


class MemoryGroupIntake(MemoryCommandIntake):
    """A group member that commits its own offsets (the worker's tasks, the projector's events).

    Fault names: ``poll`` (e.g. ``ConsumerReset``), ``commit_offsets``.
    """

    def __init__(self, broker: MemoryBroker, topic: str, group_id: str) -> None:
        super().__init__(broker, topic, group_id)
        self.recreated = 0

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        self.broker.fault("poll")
        return super().poll(max_records, timeout_s)

    def commit(self, offsets: Mapping[int, int]) -> None:
        self.broker.fault("commit_offsets")
        for p, o in offsets.items():
            self.broker.committed[(self.group_id, self.topic, p)] = o

    def pause(self, partitions: Sequence[int]) -> None:
        self.paused.update(partitions)

    def resume(self, partitions: Sequence[int]) -> None:
        self.paused.difference_update(partitions)

    def recreate(self) -> None:
        """Leave the group and join again: every partition is revoked, then assigned anew."""
        self.recreated += 1
        self.paused.clear()
        if self.positions and self._on_revoke:
            self._on_revoke(sorted(self.positions))
        self.positions = {}
        self._pending = list(range(self.broker.partitions))


class MemoryOutcomeSink:
    """A plain writer: records become visible when delivered (at ``poll`` or ``flush``).

    Fault names: ``send`` (raised by ``send``), ``deliver`` (the record is not delivered:
    its ``on_failed`` is called, retriable as the broker's ``classify`` says).
    """

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self._pending: list[
            tuple[str, bytes, bytes | None, tuple[tuple[str, bytes], ...], FailureCallback | None]
        ] = []

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        on_failed: FailureCallback | None = None,
    ) -> None:
        size = len(value) + len(key or b"")
        if size > BROKER_MAX_RECORD:
            raise RecordRefused(
                f"Kafka refused a record of {len(value):,} bytes to {topic}: {MSG_SIZE_TOO_LARGE}"
            )
        self.broker.fault("send")
        self._pending.append((topic, value, key, tuple(headers), on_failed))

    def warm(self) -> None:
        """Nothing to connect."""

    def poll(self) -> None:
        pending, self._pending = self._pending, []
        for topic, value, key, headers, on_failed in pending:
            try:
                self.broker.fault("deliver")
            except Exception as exc:
                if on_failed is not None:
                    retriable = self.broker.classify(exc) is BrokerErrorKind.RETRIABLE
                    on_failed(DeliveryError(str(exc), retriable))
                continue
            self.broker.produce(topic, value, key, headers=headers)

    def flush(self, timeout_s: float) -> int:
        self.broker.fault("flush")
        self.poll()
        return 0

    def close(self) -> None:
        self.poll()


@dataclass
class MemoryReadModel:
    """The read model in dicts: what ``projection.Projection`` keeps in Redis, in brief.

    Fault names: ``write`` (e.g. ``UnavailableError``: Redis away), ``load_states``.
    """

    broker: MemoryBroker = field(default_factory=MemoryBroker)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    histories: dict[str, list[str]] = field(default_factory=dict)
    tasks: list[Any] = field(default_factory=list)
    health: dict[str, str] = field(default_factory=dict)
    rebuilding: bool = False
    epoch: str | None = None

    def load_states(self, workflow_ids: Iterable[str]) -> dict[str, WorkflowState]:
        self.broker.fault("load_states")
        return {
            wf: WorkflowState.from_json(self.states[wf]) for wf in workflow_ids if wf in self.states
        }

    def write(self, updates: Mapping[str, Any], tasks: Any = None) -> None:
        self.broker.fault("write")
        for wf, (state, events, _old_status) in updates.items():
            self.states[wf] = state.to_json()
            self.rows[wf] = {
                "status": str(state.status),
                "seq": state.seq,
                "state": state.current_state or "",
                "output_json": state.output_json or "",
            }
            self.histories.setdefault(wf, []).extend(
                e if isinstance(e, str) else json.dumps({"seq": e.seq, "type": e.type})
                for e in events
            )
        if tasks:
            self.tasks.append(tasks)

    def write_guarded(
        self,
        updates: Mapping[str, Any],
        epoch: str | None,
        tasks: Any = None,
        expected: Mapping[str, int | None] | None = None,
    ) -> None:
        if self.rebuilding:
            raise RebuildRunning("a rebuild of the read model is running")
        if epoch != self.epoch:
            raise EpochChanged(self.epoch)
        stale = [wf for wf, seq in (expected or {}).items() if self._seq(wf) != seq]
        if stale:
            raise SeqConflict(stale)
        self.write(updates, tasks)

    def _seq(self, wf: str) -> int | None:
        row = self.rows.get(wf)
        return None if row is None or "seq" not in row else int(row["seq"])

    def mark_error(self, wf: str, reason: str) -> None:
        self.rows.setdefault(wf, {})["projection_error"] = reason

    def rebuild_running(self) -> bool:
        return self.rebuilding

    def publish_health(self, key: str, info_json: str, ttl_s: int) -> None:
        self.health[key] = info_json

    # -- the ReadModel port (what a client reads) ------------------------------------
    def get(self, wf: str) -> dict[str, Any] | None:
        row = self.rows.get(wf)
        return None if row is None else {"workflow_id": wf, **row}

    def status(self, wf: str) -> str | None:
        return self.rows.get(wf, {}).get("status")

    def history(self, wf: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.histories.get(wf, [])]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows.values():
            if "status" in row:
                out[row["status"]] = out.get(row["status"], 0) + 1
        return out
