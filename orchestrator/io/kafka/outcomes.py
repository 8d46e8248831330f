"""The worker's outcome writer: a plain idempotent producer of reports and letters.

Not transactional: the orchestrator decides a report once per message id, so a batch
whose flush is not acknowledged is simply run again. The flush goes through
a :class:`BoundedCaller`, like every blocking call of the Kafka adapter
(``kafka_adapter.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from orchestrator.config.settings import Settings
from orchestrator.io.kafka.broker_errors import CALL_GRACE_S, BoundedCaller
from orchestrator.io.kafka.clients import plain_producer
from orchestrator.io.ports import (
    CallStalled,
    DeliveryError,
    FailureCallback,
    RecordRefused,
    Stopping,
)

__all__ = ["KafkaOutcomeSink"]

log = logging.getLogger("keel.kafka")


#: How long a flush may go without one more record acknowledged before its producer is
#: given up. After a broker died, librdkafka can hold the records queued for it until
#: they time out (``message.timeout.ms``, 5 minutes), and the worker's batch, whose reports
#: they are, with them (docs/operations.md, "Losing a broker"); a partition's new leader is
#: found within ~2 s, so three seconds without progress is a stuck producer.
FLUSH_STALL_S = 3.0
#: A flush waits in slices this long, to see whether records are still being acknowledged.
FLUSH_SLICE_S = 0.25


class KafkaOutcomeSink:
    """An idempotent, non-transactional producer; ``flush`` is bounded and stoppable.

    A flush stalled past its bound, or that saw no record acknowledged for
    ``FLUSH_STALL_S``, abandons the producer (a new one serves the next records) and counts
    every record it held as unacknowledged, so the batch runs again: the orchestrator
    decides a report once per message id, so one delivered twice is harmless.
    """

    def __init__(self, settings: Settings, *, stopping: Callable[[], bool]) -> None:
        self.settings = settings
        self.stopping = stopping
        self.caller = BoundedCaller("keel-outcomes", stopping)
        #: Seconds a flush may take past its own timeout before it is abandoned.
        self.call_grace_s = CALL_GRACE_S
        self.flush_stall_s = FLUSH_STALL_S
        self.stalled_calls = 0
        self._producer: Producer | None = None
        self._abandoned: list[Producer] = []

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            # every batch of reports ends in ``flush``, which sends what lingers at once;
            # connected before its first report (a start report must not wait ~500 ms for
            # the producer id, ``plain_producer``)
            self._producer = plain_producer(
                self.settings, **{"linger.ms": self.settings.batched_linger_ms}
            )
        return self._producer

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        on_failed: FailureCallback | None = None,
    ) -> None:
        p = self.producer

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                return
            if on_failed is None:  # nothing to run again: say so loudly
                log.error("a record to %s was not delivered: %s", topic, err)
                return
            retriable = bool(err.retriable()) or err.code() == KafkaError._MSG_TIMED_OUT
            on_failed(DeliveryError(str(err), retriable))

        while True:
            try:
                p.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=list(headers) or None,
                    on_delivery=delivered,
                )
                return
            except BufferError:
                if self.stopping():
                    raise Stopping("stopped while the producer queue was full") from None
                p.poll(0.05)
            except KafkaException as exc:  # e.g. MSG_SIZE_TOO_LARGE: never fatal
                raise RecordRefused(
                    f"Kafka refused a record of {len(value):,} bytes to {topic}: {exc}"
                ) from None

    def poll(self) -> None:
        if self._producer is not None:
            self._producer.poll(0)

    def warm(self) -> None:
        """The producer made now, connected and asking for its producer id, so a worker's
        first report does not pay for that: a side effect with a sub-second start-to-close
        could otherwise read as not started and be dispatched again."""
        _ = self.producer

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every record; the number still unacknowledged."""
        if self._producer is None:
            return 0
        p = self._producer
        now = time.monotonic()
        deadline, progress_at, left = now + timeout_s, now, -1
        try:
            while True:
                wait = max(0.0, min(FLUSH_SLICE_S, deadline - now))
                remaining = int(
                    self.caller.call("flush", partial(p.flush, wait), wait + self.call_grace_s)
                )
                now = time.monotonic()
                if remaining == 0 or now >= deadline:
                    return remaining
                if left < 0 or remaining < left:
                    left, progress_at = remaining, now
                elif now - progress_at >= self.flush_stall_s:
                    raise CallStalled(
                        f"flush: {remaining} record(s) unacknowledged and none acknowledged "
                        f"for {now - progress_at:.1f}s; abandoned"
                    )
        except CallStalled as exc:
            self.stalled_calls += 1
            log.warning("%s; a new producer takes over", exc)
            self._abandoned.append(p)
            self._producer = None
            return max(1, len(p))

    def close(self) -> None:
        """Deliver what is queued (bounded, whatever the stop flag says), then let go."""
        if self._producer is not None and not self.stalled_calls:
            p = self._producer
            try:
                self.caller.call("flush", lambda: p.flush(5), 8, stoppable=False)
            except Exception as exc:
                log.warning("closing the producer: %s", exc)
        self.caller.close()
