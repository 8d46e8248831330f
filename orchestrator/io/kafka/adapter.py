"""The Kafka adapter of the runtime ports: consumer-group intakes and a transactional log
(the worker's plain outcome writer is in ``kafka_outcomes.py``).

Every blocking client call goes through one :class:`BoundedCaller` (a watchdog: a call
past its bound is abandoned, and the caller recreates the producer) and one retry
helper (``broker_errors.retry_call``) that sorts errors into retriable, abortable and
fatal. The stop flag is honoured inside every wait, so SIGTERM ends the process within
about a second even while librdkafka ignores a timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.io.kafka.broker_errors import (
    CALL_GRACE_S,
    BoundedCaller,
    BrokerErrorKind,
    CallStalled,
    ProducerReset,
    TxnAbortable,
    classify,
    retry_call,
)
from orchestrator.io.kafka.clients import (
    consume_batch,
    consumer_config,
    read_batches,
    read_partitions,
    to_record,
    transactional_producer,
)
from orchestrator.io.kafka.outcomes import KafkaOutcomeSink
from orchestrator.io.ports import (
    ConsumerReset,
    DeliveryCallback,
    RawMessage,
    Record,
)

__all__ = ["KafkaCommandIntake", "KafkaEventLog", "KafkaGroupIntake", "KafkaOutcomeSink"]

log = logging.getLogger("keel.kafka")


class KafkaCommandIntake:
    """The commands topic through one consumer-group member (range assignment)."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        group_id: str,
        *,
        instance_id: str | None,
        stopping: Callable[[], bool],
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.group_id = group_id
        self.instance_id = instance_id
        self.stopping = stopping
        self.coordinator_errors = 0
        self.consumer_resets = 0
        self.last_error = ""
        self._fatal = False
        self._callbacks: tuple[Callable[[list[int]], None], Callable[[list[int]], None]] | None
        self._callbacks = None
        self._consumer: Consumer | None = None
        self._partitions: int | None = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            # A static member's restart takes its partitions over at once, so a session
            # longer than a broker failover (~9 s in KRaft) costs nothing and keeps a
            # coordinator move from expiring the member and fencing it (docs/operations.md).
            static: dict[str, Any] = (
                {"group.instance.id": self.instance_id, "session.timeout.ms": 30000}
                if self.instance_id
                else {}
            )
            self._consumer = Consumer(
                consumer_config(
                    self.settings,
                    self.group_id,
                    **{"partition.assignment.strategy": "range", **static},
                    error_cb=self._on_error,
                )
            )
        return self._consumer

    def _on_error(self, err: KafkaError) -> None:
        self.coordinator_errors += 1
        self.last_error = str(err)
        if err.fatal() or err.code() == KafkaError._FATAL:
            self._fatal = True  # e.g. a static member fenced after a coordinator stall
        log.warning("consumer error: %s", err)

    def _recreate(self) -> None:
        """A fatal consumer is unusable: leave it (bounded) and join the group anew."""
        old, self._consumer = self._consumer, None
        self._fatal = False
        self.consumer_resets += 1
        log.warning("the consumer hit a fatal error (%s); joining the group again", self.last_error)
        if old is not None:
            closer = threading.Thread(target=_close_quietly, args=(old,), daemon=True)
            closer.start()
            closer.join(10)
        if self._callbacks is not None:
            self.subscribe(*self._callbacks)

    def subscribe(
        self,
        on_assign: Callable[[list[int]], None],
        on_revoke: Callable[[list[int]], None],
    ) -> None:
        self._callbacks = (on_assign, on_revoke)

        def assigned(consumer: Consumer, tps: list[TopicPartition]) -> None:
            owned = sorted(tp.partition for tp in tps)
            if owned:
                self._wait_for_stable_offsets(tps)
            on_assign(owned)

        def revoked(consumer: Consumer, tps: list[TopicPartition]) -> None:
            on_revoke(sorted(tp.partition for tp in tps))

        self.consumer.subscribe(
            [self.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked
        )

    def _wait_for_stable_offsets(self, tps: list[TopicPartition]) -> None:
        """With read_committed this offset fetch requires *stable* offsets (KIP-447).

        It waits until a previous owner's open transaction has committed or aborted, so
        the events read next include everything that owner committed. Asked in short
        slices so a stop request is seen.
        """
        deadline = time.monotonic() + 120
        while not self.stopping():
            try:
                self.consumer.committed(tps, timeout=5)
                return
            except KafkaException as exc:
                if classify(exc) is not BrokerErrorKind.RETRIABLE or time.monotonic() > deadline:
                    raise
                log.warning("waiting for stable offsets: %s", exc)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        if self._fatal:
            if self._callbacks is not None:
                self._callbacks[1](list(range(self._partitions or 0)))
            self._recreate()
        records = []
        for msg in consume_batch(self.consumer, max_records, timeout_s):
            err = msg.error()
            if err is None:
                records.append(to_record(msg))
            elif err.code() != KafkaError._PARTITION_EOF:
                self._on_error(err)
        return records

    def rewind(self, partition: int, offset: int) -> None:
        self.consumer.seek(TopicPartition(self.topic, partition, offset))

    def rewind_to_committed(self, partitions: Sequence[int]) -> None:
        if not partitions:
            return
        tps = [TopicPartition(self.topic, p) for p in partitions]
        for tp in self.consumer.committed(tps, timeout=30):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(self.topic, tp.partition, offset))

    def group_metadata(self) -> Any:
        return self.consumer.consumer_group_metadata()

    def partition_count(self) -> int:
        if self._partitions is None:
            meta = self.consumer.list_topics(self.topic, timeout=30)
            self._partitions = len(meta.topics[self.topic].partitions)
        return self._partitions

    def close(self) -> None:
        self.consumer.close()


#: How long ``send_offsets_to_transaction`` and ``abort_transaction`` may take before
#: their producer is given up and replaced (a new ``init_transactions`` fences it and
#: aborts its open transaction). Healthy, each takes milliseconds. After a broker died,
#: librdkafka can hang the first for good (issues #5456 and #5511: a coordinator request
#: waiting on a broker that left the metadata is never woken) and hold the second until
#: the records queued for that broker time out (``transaction.timeout.ms``, 10 s), and
#: every batch waits behind them (docs/operations.md, "Losing a broker").
STALL_S = 0.25
#: ``commit_transaction`` first flushes the batch's records, which wait for a partition's
#: new leader when its broker died: more room, the same replacement past it.
COMMIT_STALL_S = 3.0
#: Each stall doubles the bounds (up to ``CALL_GRACE_S``), so a broker that stays away
#: costs a few replacements, not one every two seconds; a commit puts them back.
#: What a bounded call may overrun the timeout it passed the client before it is abandoned.
STALL_GRACE_S = 0.25


class KafkaEventLog:
    """Keel's topics through one transactional producer, recreated when it is unusable."""

    def __init__(
        self,
        settings: Settings,
        transactional_id: str,
        intake: KafkaCommandIntake | None,
        *,
        stopping: Callable[[], bool],
        txn_timeout_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self.transactional_id = transactional_id
        self.intake = intake
        self.stopping = stopping
        self.txn_timeout_s = txn_timeout_s
        # waits in 50 ms slices: a stall is seen within ``STALL_GRACE_S``, not a slice later
        self.caller = BoundedCaller("keel-kafka-call", stopping, slice_s=0.05)
        self.broker_errors = 0
        #: 1 until a call stalls, then doubled per stall and back to 1 after a commit.
        self.stall_factor = 1.0
        self._producer: Producer | None = None
        self._abandoned: list[Producer] = []  # kept alive: destroying one may block

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = self._new_producer()
        return self._producer

    def _new_producer(self) -> Producer:
        p = transactional_producer(self.settings, self.transactional_id, init=False)
        # A connection first: a producer with none answers init_transactions' first ask for
        # its coordinator with "no brokers available" and asks again only 500 ms later,
        # which a producer replaced after a broker loss would add to the stall.
        try:
            self.caller.call("metadata", lambda: p.list_topics(timeout=2.0), 2.0 + STALL_GRACE_S)
        except (KafkaException, CallStalled) as exc:
            log.info("a new producer found no broker yet (%s); init_transactions waits", exc)
        retry_call(
            "init_transactions",
            lambda rem: self.caller.call(
                "init_transactions", lambda: p.init_transactions(rem), rem + CALL_GRACE_S
            ),
            deadline_s=120.0,
            stopping=self.stopping,
            on_retry=self._count,
            in_doubt=True,
        )
        return p

    def _count(self, exc: BaseException) -> None:
        self.broker_errors += 1

    def _call(
        self,
        what: str,
        fn: Callable[[float], Any],
        *,
        in_doubt: bool = False,
        stall_s: float | None = None,
    ) -> Any:
        """``fn(timeout)`` retried as ``retry_call`` does; each try is abandoned (the
        producer is then replaced) once it overruns its timeout by ``CALL_GRACE_S``, or,
        with ``stall_s``, once it has taken ``stall_s`` (its timeout) and ``STALL_GRACE_S``."""

        def attempt(rem: float) -> Any:
            if stall_s is None:
                return self.caller.call(what, lambda: fn(rem), rem + CALL_GRACE_S)
            timeout = min(rem, stall_s)
            return self.caller.call(what, lambda: fn(timeout), timeout + STALL_GRACE_S)

        return retry_call(
            what,
            attempt,
            deadline_s=self.txn_timeout_s,
            stopping=self.stopping,
            on_retry=self._count,
            in_doubt=in_doubt,
        )

    def _bounded(
        self, what: str, fn: Callable[[float], Any], stall_s: float, *, in_doubt: bool = False
    ) -> Any:
        """``_call`` with ``stall_s`` scaled by the stalls so far; a stall doubles them."""
        try:
            bound = min(CALL_GRACE_S, stall_s * self.stall_factor)
            return self._call(what, fn, in_doubt=in_doubt, stall_s=bound)
        except CallStalled:
            self.stall_factor *= 2
            raise

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        """The consumed offsets into the open transaction, within ``STALL_S``."""
        p = self.producer
        self._bounded(
            "send_offsets_to_transaction",
            lambda rem: p.send_offsets_to_transaction(offsets, group_metadata, rem),
            STALL_S,
        )

    def commit_open(self) -> None:
        """Commit the open transaction within ``COMMIT_STALL_S`` (in doubt if this fails)."""
        p = self.producer
        self._bounded("commit_transaction", p.commit_transaction, COMMIT_STALL_S, in_doubt=True)
        self.stall_factor = 1.0

    @staticmethod
    def _local(what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except KafkaException as exc:
            raise _txn_error(what, exc) from exc

    def begin(self) -> None:
        p = self.producer
        self._local("begin_transaction", p.begin_transaction)

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
        """Produce one record in the open transaction; a full queue is drained, not fatal.

        The hot path of every batch: one ``produce`` call, no per-record closures.
        """
        p = self.producer
        report = None if on_delivered is None else _Delivery(on_delivered)
        hdrs: list[tuple[str, str | bytes | None]] | None = list(headers) if headers else None
        while True:
            try:
                if partition is None:
                    p.produce(topic, value, key, headers=hdrs, on_delivery=report)
                else:
                    p.produce(topic, value, key, partition, headers=hdrs, on_delivery=report)
                return
            except BufferError:
                if self.stopping():
                    raise TxnAbortable("stopped while the producer queue was full") from None
                p.poll(0.05)
            except KafkaException as exc:
                raise _txn_error("produce", exc) from exc

    def commit(self, offsets: Mapping[int, int]) -> None:
        if offsets:
            assert self.intake is not None, "a log without an intake commits no offsets"
            tps = [TopicPartition(self.intake.topic, k, o) for k, o in offsets.items()]
            self.send_offsets(tps, self.intake.group_metadata())
        self.commit_open()
        self.producer.poll(0)  # serve delivery reports (they keep events_end exact)

    def abort(self) -> None:
        p = self.producer
        try:
            self._bounded("abort_transaction", p.abort_transaction, STALL_S, in_doubt=True)
        except TxnAbortable as exc:  # an abort that cannot abort: the producer is unusable
            raise ProducerReset(str(exc)) from exc

    def flush(self) -> None:
        p = self.producer
        self.caller.call(
            "flush", lambda: p.flush(self.txn_timeout_s), self.txn_timeout_s + CALL_GRACE_S
        )

    def open(self) -> None:
        """The producer, made now if there is none (``EventLog.open``)."""
        _ = self.producer

    def recreate(self) -> None:
        """A new producer under the same transactional id: it fences the old epoch."""
        if self._producer is not None:
            self._abandoned.append(self._producer)
            self._producer = None
        self._producer = self._new_producer()

    def read(
        self, topic: str, starts: Mapping[int, int], stop: Callable[[], bool] | None = None
    ) -> Iterator[Record]:
        for msg in read_partitions(self.settings, topic, dict(starts), stop=stop):
            yield to_record(msg)

    def read_batches(
        self,
        topic: str,
        starts: Mapping[int, int],
        stop: Callable[[], bool] | None = None,
        batch: int = 10_000,
    ) -> Iterator[Sequence[RawMessage]]:
        """The consumer's batches and messages untouched (``clients.read_batches``)."""
        batches = read_batches(self.settings, topic, dict(starts), batch=batch, stop=stop)
        # A consumed message's headers are a list of (str, bytes | None): the stub's dict
        # and str values are what ``produce`` accepts.
        return cast("Iterator[Sequence[RawMessage]]", batches)

    @property
    def abandoned_calls(self) -> int:
        return self.caller.abandoned

    def close(self) -> None:
        if self._producer is not None and not self.caller.abandoned:
            try:
                self.caller.call("flush", lambda: self._producer.flush(10), 15, stoppable=False)  # type: ignore[union-attr]
            except Exception as exc:
                log.warning("closing the producer: %s", exc)
        self.caller.close()


class KafkaGroupIntake(KafkaCommandIntake):
    """A group member that commits its own offsets: the worker's tasks, the projector's events.

    ``poll`` and ``commit`` run on a :class:`BoundedCaller`, so a stop request is seen
    within a fraction of a second whatever librdkafka does, and a call stalled past its
    bound is abandoned; a stalled call or a fatal consumer error makes the next ``poll``
    raise :class:`ConsumerReset`, and the owner calls :meth:`recreate`. (Rebalance
    callbacks run on the caller's helper thread while the owner waits for the poll.)
    """

    #: Extra seconds a poll may take past its timeout: rebalance callbacks run inside it.
    POLL_GRACE_S = 30.0

    def __init__(
        self,
        settings: Settings,
        topic: str,
        group_id: str,
        *,
        stopping: Callable[[], bool],
        commit_deadline_s: float = 10.0,
    ) -> None:
        super().__init__(settings, topic, group_id, instance_id=None, stopping=stopping)
        self.caller = BoundedCaller(f"keel-consumer-{topic}", stopping)
        self.commit_deadline_s = commit_deadline_s
        self.assignment: set[int] = set()
        self.stalled_calls = 0
        self._stalled = False
        self._abandoned_consumers: list[Consumer] = []  # kept alive: a call may still run

    def subscribe(
        self,
        on_assign: Callable[[list[int]], None],
        on_revoke: Callable[[list[int]], None],
    ) -> None:
        def assigned(owned: list[int]) -> None:
            self.assignment.update(owned)
            on_assign(owned)

        def revoked(gone: list[int]) -> None:
            self.assignment.difference_update(gone)
            on_revoke(gone)

        super().subscribe(assigned, revoked)

    def _stall(self, exc: CallStalled) -> ConsumerReset:
        self._stalled = True
        self.stalled_calls += 1
        self.last_error = str(exc)
        return ConsumerReset(str(exc))

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        if self._fatal or self._stalled:
            raise ConsumerReset(f"the consumer is unusable: {self.last_error}")
        consumer = self.consumer
        try:
            messages = self.caller.call(
                "poll",
                lambda: consume_batch(consumer, max_records, timeout_s),
                timeout_s + self.POLL_GRACE_S,
            )
        except CallStalled as exc:
            raise self._stall(exc) from exc
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError):
                self._on_error(err)
            if self._fatal or classify(exc) is BrokerErrorKind.FATAL:
                self._fatal = True
                raise ConsumerReset(f"poll: {exc}") from exc
            return []
        records = []
        for msg in messages:
            err = msg.error()
            if err is None:
                records.append(to_record(msg))
            elif err.code() != KafkaError._PARTITION_EOF:
                self._on_error(err)
        return records

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit synchronously; retriable errors are retried until ``commit_deadline_s``."""
        if not offsets:
            return
        consumer = self.consumer
        tps = [TopicPartition(self.topic, p, o) for p, o in offsets.items()]

        def counted(exc: BaseException) -> None:
            self.coordinator_errors += 1
            self.last_error = str(exc)

        try:
            retry_call(
                "commit",
                lambda rem: self.caller.call(
                    "commit",
                    lambda: consumer.commit(offsets=tps, asynchronous=False),
                    rem + CALL_GRACE_S,
                ),
                deadline_s=self.commit_deadline_s,
                stopping=self.stopping,
                on_retry=counted,
            )
        except CallStalled as exc:
            raise self._stall(exc) from exc
        except (ProducerReset, TxnAbortable) as exc:  # e.g. a rebalance: read again
            counted(exc)
            raise UnavailableError(f"offsets not committed: {exc}") from exc

    def pause(self, partitions: Sequence[int]) -> None:
        consumer = self._live_consumer()
        if consumer is not None:
            self._flow(consumer.pause, "pausing", partitions)

    def resume(self, partitions: Sequence[int]) -> None:
        consumer = self._live_consumer()
        if consumer is not None:
            self._flow(consumer.resume, "resuming", partitions)

    def _live_consumer(self) -> Consumer | None:
        """The consumer for a local call (pause, resume); none while one is replaced."""
        return None if self._stalled else self._consumer

    def _flow(
        self, call: Callable[[list[TopicPartition]], None], doing: str, partitions: Sequence[int]
    ) -> None:
        if not partitions:
            return
        try:
            call([TopicPartition(self.topic, p) for p in partitions])
        except KafkaException as exc:  # e.g. no longer assigned: nothing to do
            log.info("not %s %s%s: %s", doing, self.topic, list(partitions), exc)

    def recreate(self) -> None:
        """Drop the consumer (revoking what it held) and join the group with a new one."""
        old, self._consumer = self._consumer, None
        self.consumer_resets += 1
        log.warning("recreating the consumer of %s: %s", self.topic, self.last_error)
        if self._callbacks is not None and self.assignment:
            self._callbacks[1](sorted(self.assignment))
        if old is not None:
            if self._stalled:  # a call may still run on it: leave it be
                self._abandoned_consumers.append(old)
            else:
                closer = threading.Thread(target=_close_quietly, args=(old,), daemon=True)
                closer.start()
                closer.join(5)
        self._fatal = self._stalled = False
        if self._callbacks is not None:
            KafkaCommandIntake.subscribe(self, *self._callbacks)

    def close(self) -> None:
        """Leave the group, bounded: a lost coordinator must not hold the process."""
        if self._consumer is not None and not self._stalled:
            consumer = self._consumer
            try:
                self.caller.call("close", consumer.close, 5, stoppable=False)
            except Exception as exc:
                log.warning("closing the consumer of %s: %s", self.topic, exc)
        self.caller.close()


def _close_quietly(consumer: Consumer) -> None:
    try:
        consumer.close()
    except Exception as exc:
        log.warning("closing a failed consumer: %s", exc)


class _Delivery:
    """A delivery report handler: the record's partition and offset to ``callback``."""

    __slots__ = ("callback",)

    def __init__(self, callback: DeliveryCallback) -> None:
        self.callback = callback

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.callback(msg.partition() or 0, msg.offset() or 0)


def _txn_error(what: str, exc: KafkaException) -> ProducerReset | TxnAbortable:
    """A local producer call's failure: fatal resets the producer, else the batch aborts."""
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and err.fatal():
        return ProducerReset(f"{what}: {err}")
    return TxnAbortable(f"{what}: {err}")
