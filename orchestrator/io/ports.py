"""The runtime's seam: what the orchestrator loop needs from the outside, as small ports.

The loop (``command_loop``, ``recovery``) talks only to these Protocols, and so do the
worker (a :class:`TaskIntake` and an :class:`OutcomeSink`) and the projector (an
:class:`EventFeed` and a :class:`ReadModelStore`). Two adapters implement them: Kafka
(``kafka_adapter``: the real path, every process in production, integration and fault
tests) and memory (``memory``: fast unit tests of the loops only).
``tests/runtime_contract.py`` runs one contract suite against both, so the in-memory
adapter cannot drift from what Kafka does.

A :class:`Record` is what an adapter hands over: plain values checked once at the
edge, so nothing past it handles a client's optional fields. The one exception is a
rebuild's bulk read (``EventLog.read_batches``): batches of :class:`RawMessage`, on Kafka
the consumer's own messages, because a ``Record`` per message costs more than a rebuild
does with most of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.domain.model.errors import InvalidInputError, KeelError, UnavailableError
from orchestrator.domain.model.frozen_init import fast_init

if TYPE_CHECKING:
    from orchestrator.domain.model.state import WorkflowState

__all__ = [
    "BrokerErrorKind",
    "CallStalled",
    "CommandIntake",
    "ConsumerReset",
    "DeliveryCallback",
    "DeliveryError",
    "EpochChanged",
    "EventFeed",
    "EventLog",
    "GroupIntake",
    "OutcomeSink",
    "ProducerReset",
    "RawMessage",
    "ReadModel",
    "ReadModelStore",
    "RebuildRunning",
    "Record",
    "RecordRefused",
    "SeqConflict",
    "Stopping",
    "TaskIntake",
    "TimerIndex",
    "TxnAbortable",
]

#: Called with (partition, offset) once an appended record is in the log.
DeliveryCallback = Callable[[int, int], None]


@fast_init
@dataclass(frozen=True, slots=True)
class Record:
    """One record read from a topic."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: The record's timestamp (epoch ms; 0 when unknown), for the intake-lag timing.
    timestamp: int = 0

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value.decode("utf-8", "replace")
        return None


class RawMessage(Protocol):
    """One committed record as a bulk read hands it over: the accessors of a
    ``confluent_kafka.Message`` the rebuild uses, so the Kafka adapter passes the
    consumer's messages on untouched."""

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def headers(self) -> Sequence[tuple[str, bytes | None]] | None:
        """``(name, value)`` pairs in the order written (None or empty: no header)."""
        ...


class CommandIntake(Protocol):
    """The commands topic as one member of the orchestrators' consumer group sees it."""

    def subscribe(
        self,
        on_assign: Callable[[list[int]], None],
        on_revoke: Callable[[list[int]], None],
    ) -> None: ...

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Records of owned partitions, in offset order per partition (may be empty)."""
        ...

    def rewind(self, partition: int, offset: int) -> None:
        """Read ``partition`` again from ``offset`` (after an aborted batch)."""
        ...

    def rewind_to_committed(self, partitions: Sequence[int]) -> None:
        """Read each partition again from its committed offset (after a producer reset)."""
        ...

    def partition_count(self) -> int: ...

    def close(self) -> None: ...


class EventLog(Protocol):
    """Keel's topics as written by the single writer of some partitions.

    Writes happen in transactions: ``begin``, ``append``..., then ``commit`` (which also
    commits the intake's offsets) or ``abort``. ``commit`` raises
    ``broker_errors.TxnAbortable`` (abort and rewind), ``ProducerReset`` (call
    ``recreate`` and rebuild what you own) or ``Stopping``.
    """

    def begin(self) -> None: ...

    def append(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        on_delivered: DeliveryCallback | None = None,
    ) -> None: ...

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit the open transaction with the intake's next offsets per partition."""
        ...

    def abort(self) -> None: ...

    def flush(self) -> None:
        """Wait until every appended record's delivery is reported."""
        ...

    def recreate(self) -> None:
        """A new writer; it fences the old one, whose open transaction is aborted."""
        ...

    def open(self) -> None:
        """Make the writer now if there is none. Under a transactional id a dead
        predecessor used, that fences it: its open transaction is aborted at once, and a
        rebuild's read need not wait out ``transaction.timeout.ms`` to get past it."""
        ...

    def read(
        self, topic: str, starts: Mapping[int, int], stop: Callable[[], bool] | None = None
    ) -> Iterator[Record]:
        """Every committed record of the partitions from their start offsets to the end."""
        ...

    def read_batches(
        self,
        topic: str,
        starts: Mapping[int, int],
        stop: Callable[[], bool] | None = None,
        batch: int = 10_000,
    ) -> Iterator[Sequence[RawMessage]]:
        """The records ``read`` gives, in non-empty batches of at most ``batch`` as the
        reader hands them over (partitions may interleave between batches; each keeps its
        order), with no ``Record`` built (a header without a value stays, as None): a
        rebuild's bulk read."""
        ...

    def close(self) -> None: ...


class TimerIndex(Protocol):
    """The index of armed timers of the owned workflows (``timers.TimerHeap``)."""

    def arm(self, partition: int, workflow_id: str, timer_id: str, fire_at: int) -> None: ...

    def next_due_in_ms(self, now_ms: int) -> int | None: ...

    def pop_due(self, now_ms: int, limit: int = 1000) -> list[tuple[int, str, str]]: ...

    def drop_partitions(self, partitions: set[int]) -> None: ...

    def __len__(self) -> int: ...


class ReadModel(Protocol):
    """What the client and the CLI read (``projection.Projection`` over Redis)."""

    def get(self, wf: str) -> dict[str, Any] | None: ...

    def status(self, wf: str) -> str | None: ...

    def history(self, wf: str) -> list[dict[str, Any]]: ...

    def counts(self) -> dict[str, int]: ...


# ---------------------------------------------------------------------- worker, projector


class ConsumerReset(UnavailableError):
    """The intake's consumer is unusable (a fatal error, or a call stalled): ``recreate`` it."""


class RecordRefused(InvalidInputError):
    """The client refused a record at once (e.g. over the broker's size limit): never sent."""


@dataclass(frozen=True, slots=True)
class DeliveryError:
    """Why a record handed to an :class:`OutcomeSink` never reached the log."""

    reason: str
    #: True when sending it again may succeed (a timeout, a leader moving).
    retriable: bool


#: Called once for a record that was not delivered (never for one that was).
FailureCallback = Callable[[DeliveryError], None]


class GroupIntake(CommandIntake, Protocol):
    """One member of a consumer group that commits its own offsets, outside transactions.

    At least once: the owner commits a batch's next offsets only after its outputs are
    acknowledged; anything not committed is read again after a rewind, a crash or a
    rebalance. ``poll`` raises :class:`ConsumerReset` when the consumer is unusable.
    """

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit the next offset per partition; ``UnavailableError`` when it could not."""
        ...

    def recreate(self) -> None:
        """Drop the consumer and join the group again with a new one."""
        ...


#: The tasks topic as one worker of the workers' group sees it.
TaskIntake = GroupIntake


class EventFeed(GroupIntake, Protocol):
    """The events topic as one projector of the projectors' group sees it.

    A projector fed the committed events in-process (``committed.py``) pauses the
    partitions it has folded in order that way, and reads the topic again only for
    what the hand-off did not bring (docs/performance.md, "Where the projector runs").
    """

    def pause(self, partitions: Sequence[int]) -> None:
        """Fetch nothing more of these partitions (what was fetched is dropped)."""
        ...

    def resume(self, partitions: Sequence[int]) -> None:
        """Fetch these partitions again, from the position :meth:`rewind` sets."""
        ...


class OutcomeSink(Protocol):
    """Where a worker's reports, heartbeats and dead letters go: a plain (idempotent) writer.

    ``send`` hands a record over (``RecordRefused`` when the client refuses it at once);
    ``flush`` waits for every delivery report and returns how many records are still
    unacknowledged; a record that failed calls its ``on_failed``.
    """

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        on_failed: FailureCallback | None = None,
    ) -> None: ...

    def poll(self) -> None:
        """Serve the delivery reports that are ready, without waiting."""
        ...

    def warm(self) -> None:
        """Be ready to send before the first task: a start report must not wait for a
        connection (a step's start-to-close counts from its dispatch)."""
        ...

    def flush(self, timeout_s: float) -> int: ...

    def close(self) -> None: ...


class ReadModelStore(Protocol):
    """What the projector writes (``projection.Projection`` over Redis).

    ``updates`` map a workflow id to (new state, its new history lines, previous status);
    ``tasks`` are the human-task inbox's changes of the same batch, written with them.
    """

    def load_states(self, workflow_ids: Iterable[str]) -> dict[str, WorkflowState]: ...

    def write(self, updates: Mapping[str, Any], tasks: Any = None) -> None: ...

    def write_guarded(
        self,
        updates: Mapping[str, Any],
        epoch: str | None,
        tasks: Any = None,
        expected: Mapping[str, int | None] | None = None,
    ) -> None:
        """``write`` unless a rebuild runs (``RebuildRunning``) or ran (``EpochChanged``),
        or a row named in ``expected`` does not hold that seq (``None``: no row;
        ``SeqConflict``), all checked atomically with the write."""
        ...

    def mark_error(self, wf: str, reason: str) -> None: ...

    def rebuild_running(self) -> bool: ...

    def publish_health(self, key: str, info_json: str, ttl_s: int) -> None: ...


# -------------------------------------------------------------------- the ports' errors
# What an adapter raises through a port, whichever adapter it is: the Kafka adapter sorts a
# client's errors into them (``broker_errors``, ``projection``), the in-memory one raises
# them itself. They live beside the ports so a caller or a test adapter needs no client.


class BrokerErrorKind(StrEnum):
    RETRIABLE = "retriable"
    ABORTABLE = "abortable"
    FATAL = "fatal"


class TxnAbortable(UnavailableError):
    """The open transaction must be aborted; its input is processed again."""


class ProducerReset(UnavailableError):
    """The transactional producer is unusable (fatal, fenced, or in doubt): recreate it."""


class CallStalled(ProducerReset):
    """A blocking client call ran past its bound and was abandoned."""


class Stopping(KeelError):
    """The process was asked to stop while a call was waiting (a Kafka call, the worker's
    Redis gate, a projector waiting out a rebuild): what the call served is abandoned, not
    committed, and read again by whoever owns it next; never a failure of the work.

    The one ``Stopping``: ``broker_errors`` and ``handlers.effects`` re-export it."""


class RebuildRunning(KeelError):
    """A rebuild holds the read model; live projectors wait for it to finish."""


class SeqConflict(Exception):
    """Rows that did not hold the sequence number the writer expected (another writer, or
    a row assumed new that exists): reload them and fold again."""

    def __init__(self, workflow_ids: list[str]) -> None:
        super().__init__(", ".join(workflow_ids))
        self.workflow_ids = workflow_ids


class EpochChanged(Exception):
    """The read model was rebuilt since this writer's cache was filled."""

    def __init__(self, epoch: str | None) -> None:
        super().__init__(epoch)
        self.epoch = epoch
