"""Kafka client configuration shared by every Keel process.

Settings here are deliberate: Java-compatible key partitioning (murmur2) so any
producer of commands lands on the partition its orchestrator owns; low linger and
fetch waits because a workflow step is several hops and each hop's wait adds up;
``read_committed`` everywhere, because only committed transactions are facts.

Every Producer, Consumer and AdminClient a Keel process makes from its settings takes
its configuration from ``producer_config``, ``consumer_config`` or ``admin_config``, so
each one authenticates and encrypts as ``KEEL_KAFKA_SECURITY_PROTOCOL`` and the SASL and
TLS settings say (``security_config``; docs/operations.md, the trust model).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from orchestrator.config.settings import KafkaSecurityProtocol, Settings, redact
from orchestrator.io.ports import Record, Stopping

log = logging.getLogger("keel.kafka")

#: librdkafka's own log lines go through this logger: errors only, every password redacted,
#: and only where the process configured logging (a service's JSON logs): a CLI command
#: prints its one error line, not the client's retries before it (docs/configuration.md).
client_log = logging.getLogger("keel.librdkafka")
client_log.setLevel(logging.ERROR)
client_log.addHandler(logging.NullHandler())


class _RedactedOncePerWindow(logging.Filter):
    """Masks passwords in a librdkafka line (a host list it echoes may carry one), and lets
    one line of a kind through per window: a broker that is down makes every client of a
    process log the same refusal on each reconnect, dozens of lines a second."""

    WINDOW_S = 30.0

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        text = redact(record.getMessage())
        kind = re.sub(r"\d+", "#", text)
        now = time.monotonic()
        with self._lock:
            last, quiet = self._last.get(kind, (-self.WINDOW_S, 0))
            if now - last < self.WINDOW_S:
                self._last[kind] = (last, quiet + 1)
                return False
            if len(self._last) > 1000:
                self._last.clear()
            self._last[kind] = (now, 0)
        record.msg = (
            text if not quiet else f"{text} ({quiet} more like it since the last one shown)"
        )
        record.args = None
        return True


client_log.addFilter(_RedactedOncePerWindow())
# the clients' own errors as Keel reports them (``consumer error: ...``), the same way
log.addFilter(_RedactedOncePerWindow())

#: A record as the Kafka client delivers it (``to_record`` makes it a ports ``Record``):
#: named here so a process that handles one does not import the client itself.
ClientMessage = Message
#: A producer as the Kafka client makes it (:func:`plain_producer`, :func:`transactional_producer`).
ClientProducer = Producer

PARTITIONER = "murmur2_random"
# The clients' tuning is in the settings (docs/configuration.md):
# ``settings.fetch_wait_max_ms`` (100): how long a fetch may wait at the broker for data.
#   No hop pays it: the broker answers a waiting fetch as soon as a record becomes
#   readable (a commit marker moves the last stable offset on). An idle consumer sends one
#   fetch per wait, though, and the broker spent ~0.4 ms of CPU on each: 10 ms cost it
#   ~15 % of a core with nothing to do (git show 6f66b40:docs/performance.md, "Idle fetches").
# ``settings.linger_ms`` (1): producers' linger; each hop of a workflow pays it.
# ``settings.batched_linger_ms`` (50): linger of producers whose every batch ends in
#   ``commit_transaction`` or ``flush`` (the orchestrator's transactions, the worker's
#   reports): both send at once whatever lingers, so a long linger costs no latency, and
#   saves the client's thread a wake-up per record and the broker requests
#   (git show 6f66b40:docs/performance.md, "Throughput").

#: How long a client waits at most between two attempts to reach a broker it lost. Each
#: failed attempt is also when librdkafka asks again who leads a partition and who
#: coordinates a group or a transaction, and its default backoff doubles up to 10 s: after
#: a broker died, a producer learned of the new leaders and transaction coordinator 2-7 s
#: after the cluster had moved them (docs/operations.md, "Losing a broker"). Half a second
#: keeps that wait short; the cost is one refused connection a second per lost broker.
RECONNECT_BACKOFF = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}


def _headers(msg: Message) -> tuple[tuple[str, bytes], ...]:
    raw: Any = msg.headers()
    if not raw:
        return ()
    if type(raw) is list and all(type(v) is bytes for _, v in raw):
        return tuple(raw)  # the common case: every value present, as bytes
    pairs = raw.items() if isinstance(raw, dict) else raw
    out = []
    for key, value in pairs:
        if value is not None:
            out.append((key, value if isinstance(value, bytes) else str(value).encode()))
    return tuple(out)


def header(msg: Message, name: str) -> str | None:
    """The value of a record's header ``name``, if it has one."""
    for key, value in _headers(msg):
        if key == name:
            return value.decode("utf-8", "replace")
    return None


def to_record(msg: Message) -> Record:
    """A consumed message (no error) as a plain :class:`Record`."""
    ts_type, ts = msg.timestamp()
    return Record(
        msg.topic() or "",
        msg.partition() or 0,
        msg.offset() or 0,
        msg.key(),
        msg.value(),
        _headers(msg),
        ts if ts_type != TIMESTAMP_NOT_AVAILABLE and ts > 0 else 0,
    )


def security_config(settings: Settings) -> dict[str, str]:
    """The librdkafka properties that authenticate and encrypt a client's connections:
    ``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password`` and
    ``ssl.ca.location`` as the settings give them; none at all for the default PLAINTEXT
    (the settings refuse SASL or TLS values with it).

    Holds the SASL password in clear, as librdkafka needs it: pass it to a client, never
    to a log (``redact`` hides ``sasl.password`` in a message, should one carry it).
    """
    protocol = settings.kafka_security_protocol
    if protocol is KafkaSecurityProtocol.PLAINTEXT:
        return {}
    out = {"security.protocol": protocol.value}
    if protocol.sasl:
        mechanism, password = settings.kafka_sasl_mechanism, settings.kafka_sasl_password
        assert mechanism and settings.kafka_sasl_username and password  # Settings checked
        out["sasl.mechanism"] = mechanism.value
        out["sasl.username"] = settings.kafka_sasl_username
        out["sasl.password"] = password.get_secret_value()
    if settings.kafka_ssl_ca_location:
        out["ssl.ca.location"] = settings.kafka_ssl_ca_location
    return out


def debug_config(settings: Settings) -> dict[str, Any]:
    """librdkafka's ``debug`` contexts when ``KEEL_KAFKA_DEBUG`` names some (none by
    default). Their lines go to the process's stderr as librdkafka writes them (it masks
    its own secret properties): routed through a Python logger, a line logged from one
    of the client's threads during a call trips an assertion in confluent-kafka."""
    if not settings.kafka_debug:
        return {}
    return {"debug": settings.kafka_debug, "logger": None}


def producer_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.kafka_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": settings.linger_ms,
        "partitioner": PARTITIONER,
        "compression.type": "lz4",
        **RECONNECT_BACKOFF,
        "logger": client_log,
        **security_config(settings),
        **debug_config(settings),
        **extra,
    }


#: How long a new plain producer waits for its first connection (``plain_producer``).
CONNECT_FIRST_S = 1.0


def plain_producer(settings: Settings, **extra: Any) -> Producer:
    """A producer outside transactions, with Keel's client settings and ``extra`` (the
    client's commands), connected before it is returned.

    An idempotent producer asks for its producer id as soon as it is made; with no
    connection yet it finds no broker and asks again only 500 ms later, and its first
    record waits for that id. A metadata request first (~28 ms) connects it: the first
    send of a fresh producer then took 28-38 ms in 9 of 10 tries instead of ~503 ms in 8
    of 10 (docs/performance.md, "Where a remote run's time goes"). A broker that does not
    answer within ``CONNECT_FIRST_S`` is the first send's to report.
    """
    producer = Producer(producer_config(settings, **extra))
    try:
        producer.list_topics(timeout=min(CONNECT_FIRST_S, settings.admin_timeout_s))
    except KafkaException as exc:
        log.info("a new producer found no broker yet (%s); its first send waits", exc)
    return producer


def list_partitions(settings: Settings, topic: str) -> list[int]:
    """The partitions of ``topic``, from a plain consumer's metadata (none when missing)."""
    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}.reader"))
    try:
        meta = consumer.list_topics(topic, timeout=settings.admin_timeout_s)
    finally:
        consumer.close()
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        return []
    return sorted(found.partitions)


class EndTail:
    """Topic ``topic`` read from the end it had when this was made, outside any group's
    offsets: :meth:`poll` returns the records written since (the ones without an error)."""

    def __init__(self, settings: Settings, topic: str, group_id: str, **extra: Any) -> None:
        self.topic = topic
        self.consumer = Consumer(
            consumer_config(settings, group_id, **{"enable.partition.eof": False, **extra})
        )
        meta = self.consumer.list_topics(topic, timeout=settings.admin_timeout_s)
        parts = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
        starts = []
        for p in parts:
            _, high = self.consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=settings.admin_timeout_s
            )
            starts.append(TopicPartition(topic, p, high))
        self.consumer.assign(starts)

    def poll(self, timeout_s: float) -> list[Message]:
        """What arrived: waits up to ``timeout_s`` for the first record, then takes the rest
        already fetched."""
        found = []
        msg = self.consumer.poll(timeout_s)
        while msg is not None:
            err = msg.error()
            if err is None or err.code() == KafkaError._PARTITION_EOF:
                found.append(msg)
            msg = self.consumer.poll(0)
        return found

    def close(self) -> None:
        self.consumer.close()


def transactional_producer(
    settings: Settings, transactional_id: str, *, init: bool = True
) -> Producer:
    producer = Producer(
        producer_config(
            settings,
            **{
                "transactional.id": transactional_id,
                "linger.ms": settings.batched_linger_ms,
                # A zombie's open transaction blocks read_committed readers until it
                # ends; keep that window short.
                "transaction.timeout.ms": 10000,
                # Right after a commit the coordinator may still be finishing it and
                # answers the next AddOffsets/AddPartitions with CONCURRENT_TRANSACTIONS;
                # the default 100 ms backoff would then add 100 ms to a hop.
                "retry.backoff.ms": 5,
                "retry.backoff.max.ms": 50,
            },
        )
    )
    if init:
        producer.init_transactions(60)
    return producer


def consumer_config(settings: Settings, group_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.kafka_servers,
        "group.id": group_id,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": settings.fetch_wait_max_ms,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 300000,
        **RECONNECT_BACKOFF,
        "logger": client_log,
        **security_config(settings),
        **debug_config(settings),
        **extra,
    }


def admin_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """An AdminClient's configuration: the servers and client security, then ``extra``."""
    return {
        "bootstrap.servers": settings.kafka_servers,
        **RECONNECT_BACKOFF,
        **security_config(settings),
        **extra,
    }


#: What one fetch of a rebuild's reader may take per partition. The client's default
#: (1 MiB) held a cold read of ``keel.events`` to ~200k records/s; 8 MiB gave ~340k on the
#: same topic (git show 6f66b40:docs/performance.md, "Cold rebuild"). A bulk read only:
#: the intakes keep the default, their fetches are small.
READ_PARTITION_FETCH_BYTES = 8 * 2**20
#: How long the broker may hold a rebuild's fetch for data that is not there. A bulk
#: read learns it reached the end (EOF) only from a fetch that came back empty, so this
#: wait is paid at the end of every read: 50 ms made reading an empty snapshot topic
#: take ~60 ms, 1 ms ~10 ms. While data is there a fetch returns at once either way.
READ_FETCH_WAIT_MS = 5


def read_partitions(
    settings: Settings,
    topic: str,
    starts: dict[int, int],
    *,
    batch: int = 1000,
    timeout_s: float = 120.0,
    stop: Callable[[], bool] | None = None,
) -> Iterable[Message]:
    """Every committed record of the given partitions from their start offsets to the end,
    one at a time (``read_batches``)."""
    for records in read_batches(
        settings, topic, starts, batch=batch, timeout_s=timeout_s, stop=stop
    ):
        yield from records


def read_batches(
    settings: Settings,
    topic: str,
    starts: dict[int, int],
    *,
    batch: int = 1000,
    timeout_s: float = 120.0,
    stop: Callable[[], bool] | None = None,
) -> Iterator[list[Message]]:
    """Every committed record of the given partitions from their start offsets to the end,
    in the batches the consumer hands over (records only: no error or EOF message).

    "The end" is each partition's high watermark when the read began (``high_watermarks``),
    not the first EOF a ``read_committed`` consumer reports: that EOF comes at the last
    stable offset, which stays before a transaction already committed until the broker
    writes its marker into the partition. After a broker loss that takes seconds (the
    coordinator waits for the partition's new leader), and a rebuild that stopped at the
    first EOF lost the runs of that transaction while their commands stayed committed
    (docs/operations.md, "Losing a broker"). A transaction still open at the start is
    waited for until it ends (``transaction.timeout.ms`` bounds a dead producer's; an
    orchestrator fences its own predecessor before it reads, docs/operations.md).
    Used to rebuild state, so it raises rather than silently stopping short; ``stop``
    (when given and true) ends the read with ``broker_errors.Stopping``. A rebuild takes
    the batches whole: one Python call per record fewer (git show 6f66b40:docs/performance.md,
    "The reader's fetch size").
    """
    deadline = time.monotonic() + timeout_s
    ends = high_watermarks(settings, topic, list(starts), deadline=deadline, stop=stop)
    starts = {p: off for p, off in starts.items() if ends[p] > off}
    if not starts:
        return
    consumer = Consumer(
        consumer_config(
            settings,
            f"{settings.topic_prefix}.reader",
            **{
                "enable.partition.eof": True,
                "fetch.wait.max.ms": READ_FETCH_WAIT_MS,
                "max.partition.fetch.bytes": READ_PARTITION_FETCH_BYTES,
            },
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, off) for p, off in starts.items()])
        pending = set(starts)
        while pending:
            if stop is not None and stop():
                raise Stopping(f"stopped while reading {topic}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} {sorted(pending)} took over {timeout_s}s")
            msgs = consume_batch(consumer, batch, 0.2)
            records = [m for m in msgs if m.error() is None]
            if len(records) != len(msgs):
                for msg in msgs:
                    err = msg.error()
                    if err is None:
                        continue
                    if err.code() == KafkaError._PARTITION_EOF:
                        # an EOF short of the end: a marker still to come, reported
                        # again at each new end the partition reaches
                        if (msg.offset() or 0) >= ends[msg.partition() or 0]:
                            pending.discard(msg.partition())
                    elif not err.retriable():
                        raise KafkaException(err)
            if records:
                yield records
    finally:
        consumer.close()


def high_watermarks(
    settings: Settings,
    topic: str,
    partitions: list[int],
    *,
    deadline: float,
    stop: Callable[[], bool] | None = None,
) -> dict[int, int]:
    """Each partition's high watermark: one past its last replicated record, committed or
    not (a ``read_uncommitted`` handle: a ``read_committed`` one answers the last stable
    offset). A partition's new leader refuses the question until its watermark has caught
    up with the records the old leader acknowledged (KIP-207), so the answer is never short
    of a commit the producer saw succeed; that refusal and a leader between brokers are
    asked again until ``deadline`` (``time.monotonic``), each ask bounded to a second so a
    stopping process is not held by one."""
    if not partitions:
        return {}
    asker = Consumer(
        consumer_config(
            settings, f"{settings.topic_prefix}.reader", **{"isolation.level": "read_uncommitted"}
        )
    )
    ends: dict[int, int] = {}
    backoff = 0.05
    try:
        for p in partitions:
            while True:
                if stop is not None and stop():
                    raise Stopping(f"stopped while asking the end of {topic}")
                left = deadline - time.monotonic()
                try:
                    _, ends[p] = asker.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=max(0.2, min(1.0, left)), cached=False
                    )
                    break
                except KafkaException as exc:
                    if time.monotonic() + backoff >= deadline:
                        raise
                    log.info("asking the end of %s [%d] again: %s", topic, p, exc)
                    time.sleep(backoff)
                    backoff = min(1.0, backoff * 2)
    finally:
        asker.close()
    return ends


def consume_batch(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Whatever is ready, up to ``max_messages``, waiting at most ``timeout_s`` for the first.

    ``Consumer.consume(n, timeout)`` waits for *n* messages or the whole timeout, which
    adds the timeout to every hop at light load; this returns as soon as anything came.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(max_messages - 1, 0)] if max_messages > 1 else [first]


def poll_records(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Like ``consume_batch``, records only: consumer errors are logged, never processed."""
    records = []
    for msg in consume_batch(consumer, max_messages, timeout_s):
        err = msg.error()
        if err is None:
            records.append(msg)
        elif err.code() != KafkaError._PARTITION_EOF:
            log.warning("consumer error: %s", err)
    return records


def next_offsets(records: Iterable[Message]) -> list[TopicPartition]:
    """The offsets to commit after ``records``: one past the last record per partition."""
    nxt: dict[tuple[str, int], int] = {}
    for m in records:
        nxt[(m.topic() or "", m.partition() or 0)] = (m.offset() or 0) + 1
    return [TopicPartition(t, p, o) for (t, p), o in nxt.items()]
