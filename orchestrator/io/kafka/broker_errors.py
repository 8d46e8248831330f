"""Broker errors sorted the way librdkafka documents them, and calls that cannot hang.

Every transactional call ends one of four ways for its caller:

* **retriable** (``err.retriable()``: a timeout, a coordinator moving): the call is
  tried again with backoff until a deadline;
* **abortable** (``err.txn_requires_abort()``): the batch is aborted and its input
  rewound — :class:`TxnAbortable`;
* **fatal or fenced** (``err.fatal()``, or a retriable error past its deadline while the
  outcome is in doubt): the producer is unusable — :class:`ProducerReset`; the caller
  recreates it (a new ``init_transactions`` fences the old epoch and settles its open
  transaction) and rebuilds what it owns from the log;
* **stopping**: the process was asked to stop — :class:`Stopping`.

librdkafka does not always honour the timeout it is given: ``send_offsets_to_transaction``
can block far past it when the group coordinator's broker disappears (librdkafka issues
#5456 and #5511, fixes unreleased at the time of writing). :class:`BoundedCaller` runs
each blocking call on a helper thread and waits for it in slices, so a stop request is
seen within a fraction of a second and a call past its bound is abandoned
(:class:`CallStalled`) instead of hanging the process.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from orchestrator.io.ports import (
    BrokerErrorKind,
    CallStalled,
    ProducerReset,
    Stopping,
    TxnAbortable,
)

__all__ = [
    "CALL_GRACE_S",
    "BoundedCaller",
    "classify",
    "retry_call",
]

log = logging.getLogger("keel.kafka")
T = TypeVar("T")

#: Extra seconds a client call may take past the timeout it was given before it is
#: abandoned (librdkafka sometimes overruns its own timeout; see the module docstring).
CALL_GRACE_S = 15.0


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a client exception carries, if any."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def classify(exc: BaseException) -> BrokerErrorKind:
    """How a caller must treat ``exc`` raised by a transactional call."""
    err = kafka_error(exc)
    if err is None:
        return BrokerErrorKind.FATAL
    if err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
        return BrokerErrorKind.FATAL
    if err.txn_requires_abort():
        return BrokerErrorKind.ABORTABLE
    if err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
        return BrokerErrorKind.RETRIABLE
    return BrokerErrorKind.FATAL


class _Job:
    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class BoundedCaller:
    """Runs blocking client calls on a helper thread; the caller waits in short slices.

    The waiting thread (the main thread) stays responsive to signals and to the stop
    flag; a call past ``bound_s`` is abandoned: its thread is left to finish on its own
    and a fresh one serves the next call.
    """

    def __init__(self, name: str, stopping: Callable[[], bool], slice_s: float = 0.2) -> None:
        self.name = name
        self.stopping = stopping
        self.slice_s = slice_s
        self.abandoned = 0
        self.busy_since: float | None = None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._start_thread()

    def _start_thread(self) -> None:
        q = self._queue
        threading.Thread(target=self._serve, args=(q,), name=self.name, daemon=True).start()

    @staticmethod
    def _serve(q: queue.SimpleQueue[_Job | None]) -> None:
        while True:
            job = q.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as exc:  # handed to the waiting caller
                job.error = exc
            job.done.set()

    def call(self, what: str, fn: Callable[[], T], bound_s: float, *, stoppable: bool = True) -> T:
        """``fn()`` on the helper thread; raises what it raised, or Stopping/CallStalled."""
        job = _Job(fn)
        self.busy_since = time.monotonic()
        self._queue.put(job)
        deadline = self.busy_since + bound_s
        try:
            while not job.done.wait(self.slice_s):
                if stoppable and self.stopping():
                    self._abandon()
                    raise Stopping(f"stopped while waiting for {what}")
                if time.monotonic() > deadline:
                    self._abandon()
                    raise CallStalled(f"{what} did not return within {bound_s:g}s; abandoned")
        finally:
            self.busy_since = None
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def _abandon(self) -> None:
        """Leave the stuck thread behind (it exits after its call); serve from a new one."""
        self.abandoned += 1
        self._queue.put(None)  # the old thread stops once its call returns
        self._queue = queue.SimpleQueue()
        self._start_thread()

    def close(self) -> None:
        self._queue.put(None)


#: The longest wait between two tries of a call that failed retriably. After a broker
#: died, the errors (``_TRANSPORT``, ``CONCURRENT_TRANSACTIONS`` while the new coordinator
#: settles the transaction the old one held) each come back at once and end as soon as the
#: cluster has moved; every wait past that moment adds to the stall. A longer cap (it was
#: 1 s) saves nothing: the tries are one request each, and their warnings are logged once
#: per 30 s.
MAX_RETRY_BACKOFF_S = 0.2


def retry_call(
    what: str,
    attempt: Callable[[float], T],
    *,
    deadline_s: float,
    stopping: Callable[[], bool],
    on_retry: Callable[[BaseException], None] | None = None,
    in_doubt: bool = False,
) -> T:
    """``attempt(remaining_s)`` until it succeeds, retrying retriable errors with backoff.

    The one produce/transaction retry loop of Keel. An abortable error raises
    :class:`TxnAbortable`; a fatal one, or a retriable one still failing at the deadline
    when the outcome is ``in_doubt`` (a commit), raises :class:`ProducerReset`; at the
    deadline otherwise, :class:`TxnAbortable`.
    """
    deadline = time.monotonic() + deadline_s
    backoff = 0.05
    while True:
        if stopping():
            raise Stopping(f"stopped while retrying {what}")
        remaining = deadline - time.monotonic()
        try:
            return attempt(max(0.5, remaining))
        except KafkaException as exc:
            kind = classify(exc)
            if kind is BrokerErrorKind.ABORTABLE:
                raise TxnAbortable(f"{what}: {kafka_error(exc)}") from exc
            if kind is BrokerErrorKind.FATAL:
                raise ProducerReset(f"{what}: {kafka_error(exc)}") from exc
            if on_retry is not None:
                on_retry(exc)
            if time.monotonic() + backoff >= deadline:
                cls = ProducerReset if in_doubt else TxnAbortable
                raise cls(
                    f"{what}: still failing after {deadline_s:g}s: {kafka_error(exc)}"
                ) from exc
            log.warning("%s: retriable broker error, retrying: %s", what, kafka_error(exc))
            time.sleep(backoff)
            backoff = min(MAX_RETRY_BACKOFF_S, backoff * 2)
