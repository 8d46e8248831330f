"""The worker's Kafka adapter under broker trouble, with stand-in clients (no broker).

``KafkaGroupIntake`` and ``KafkaOutcomeSink`` run every blocking call on a bounded
caller: a stop request ends a call that ignores its timeout, a stalled call is
abandoned (the consumer or producer is replaced), retriable commit errors are retried
and the rest reported as ``UnavailableError``. Waits here are bounded by tiny slices.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.io.kafka.adapter import KafkaGroupIntake
from orchestrator.io.kafka.outcomes import KafkaOutcomeSink
from orchestrator.io.ports import ConsumerReset, Stopping

SETTINGS = Settings(
    topic_prefix="mem",
    partitions=4,
    bootstrap_servers="127.0.0.1:1",
    redis_url="redis://127.0.0.1:1/0",
)


class StuckConsumer:
    """A consumer whose poll never returns until released (librdkafka ignoring a timeout)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.commits: list[Any] = []
        self.commit_errors: list[BaseException] = []

    def poll(self, timeout: float) -> None:
        self.release.wait(5)
        return None

    def consume(self, n: int, timeout: float) -> list[Any]:
        return []

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        if self.commit_errors:
            raise self.commit_errors.pop(0)
        self.commits.append(offsets)

    def close(self) -> None:
        self.release.set()


def _intake(stop: threading.Event) -> tuple[KafkaGroupIntake, StuckConsumer]:
    intake = KafkaGroupIntake(SETTINGS, "mem.activity-tasks", "mem.workers", stopping=stop.is_set)
    intake.caller.slice_s = 0.005
    fake = StuckConsumer()
    intake._consumer = fake  # type: ignore[assignment]
    return intake, fake


def _err(code: int, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, "injected", **flags))


def test_a_stop_request_ends_a_poll_that_ignores_its_timeout():
    stop = threading.Event()
    intake, fake = _intake(stop)
    threading.Timer(0.01, stop.set).start()  # SIGTERM while librdkafka hangs
    with pytest.raises(Stopping, match="stopped while waiting for poll"):
        intake.poll(10, 0.001)
    fake.release.set()


def test_a_stalled_poll_is_abandoned_and_the_consumer_recreated():
    stop = threading.Event()
    intake, fake = _intake(stop)
    intake.POLL_GRACE_S = 0.02
    with pytest.raises(ConsumerReset, match="poll did not return within"):
        intake.poll(10, 0.001)
    with pytest.raises(ConsumerReset, match="the consumer is unusable"):
        intake.poll(10, 0.001)  # until recreated
    intake.recreate()
    assert intake.consumer_resets == 1 and intake.stalled_calls == 1
    assert intake._abandoned_consumers == [fake]  # its call may still run: not closed
    assert intake._consumer is None  # the next use joins the group with a new one
    fake.release.set()


def test_a_fatal_consumer_error_makes_the_next_poll_ask_for_a_new_consumer():
    intake, fake = _intake(threading.Event())
    intake._on_error(KafkaError(KafkaError._FATAL, "injected: fenced", fatal=True))
    with pytest.raises(ConsumerReset, match="injected: fenced"):
        intake.poll(10, 0.001)
    assert intake.coordinator_errors == 1
    fake.release.set()


def test_a_retriable_commit_error_is_retried_and_the_rest_reported():
    intake, fake = _intake(threading.Event())
    fake.commit_errors = [_err(KafkaError._TIMED_OUT, retriable=True)]
    intake.commit({0: 5, 2: 7})
    [(tp0, tp2)] = fake.commits
    assert (tp0.partition, tp0.offset, tp2.partition, tp2.offset) == (0, 5, 2, 7)
    assert intake.coordinator_errors == 1
    fake.commit_errors = [_err(KafkaError.REBALANCE_IN_PROGRESS)]
    with pytest.raises(UnavailableError, match="offsets not committed: commit: "):
        intake.commit({0: 6})
    fake.release.set()


class StuckProducer:
    def __init__(self) -> None:
        self.release = threading.Event()

    def flush(self, timeout: float) -> int:
        self.release.wait(5)
        return 0

    def __len__(self) -> int:
        return 3


def test_a_stalled_flush_abandons_the_producer_and_counts_its_records_unacknowledged():
    sink = KafkaOutcomeSink(SETTINGS, stopping=lambda: False)
    sink.call_grace_s = 0.02
    sink.caller.slice_s = 0.005
    stuck = StuckProducer()
    sink._producer = stuck  # type: ignore[assignment]
    assert sink.flush(0.001) == 3  # the batch runs again
    assert sink.stalled_calls == 1 and sink._abandoned == [stuck]
    assert sink._producer is None
    stuck.release.set()


def test_a_stop_request_ends_a_flush():
    stop = threading.Event()
    sink = KafkaOutcomeSink(SETTINGS, stopping=stop.is_set)
    sink.caller.slice_s = 0.005
    stuck = StuckProducer()
    sink._producer = stuck  # type: ignore[assignment]
    threading.Timer(0.01, stop.set).start()
    with pytest.raises(Stopping, match="stopped while waiting for flush"):
        sink.flush(60)
    stuck.release.set()


class SlowProducer:
    """Acknowledges its records as ``left`` says, one flush slice at a time."""

    def __init__(self, left: list[int]) -> None:
        self.left = left
        self.waits: list[float] = []

    def flush(self, timeout: float) -> int:
        self.waits.append(timeout)
        return self.left.pop(0) if len(self.left) > 1 else self.left[0]

    def __len__(self) -> int:
        return self.left[0]


def test_a_flush_that_acknowledges_nothing_for_its_stall_bound_abandons_the_producer():
    sink = KafkaOutcomeSink(SETTINGS, stopping=lambda: False)
    sink.flush_stall_s = 0.0  # the first slice without progress after one with
    stuck = SlowProducer([5, 5])
    sink._producer = stuck  # type: ignore[assignment]
    assert sink.flush(60) == 5
    assert sink.stalled_calls == 1 and sink._abandoned == [stuck] and sink._producer is None
    assert len(stuck.waits) == 2 and max(stuck.waits) <= 0.25


def test_a_flush_that_keeps_acknowledging_waits_for_every_record():
    sink = KafkaOutcomeSink(SETTINGS, stopping=lambda: False)
    sink.flush_stall_s = 0.0
    draining = SlowProducer([9, 6, 2, 0])
    sink._producer = draining  # type: ignore[assignment]
    assert sink.flush(60) == 0
    assert sink.stalled_calls == 0 and sink._producer is draining
    assert len(draining.waits) == 4


def test_a_flush_past_its_timeout_returns_what_is_left_and_keeps_the_producer():
    sink = KafkaOutcomeSink(SETTINGS, stopping=lambda: False)
    slow = SlowProducer([4, 3])
    sink._producer = slow  # type: ignore[assignment]
    assert sink.flush(0.0) == 4
    assert sink.stalled_calls == 0 and sink._producer is slow


def test_warm_makes_the_connected_producer_before_any_report(monkeypatch):
    """A worker warms its sink before it takes a task: the producer (connected by
    ``plain_producer``) exists before the first report, which then never waits for it."""
    import orchestrator.io.kafka.outcomes as outcomes

    made: list[dict[str, Any]] = []

    def plain_producer(settings: Settings, **extra: Any) -> object:
        made.append(extra)
        return object()

    monkeypatch.setattr(outcomes, "plain_producer", plain_producer)
    sink = KafkaOutcomeSink(SETTINGS, stopping=lambda: False)
    assert sink._producer is None and made == []
    sink.warm()
    producer = sink._producer
    assert producer is not None and len(made) == 1
    sink.warm()
    assert sink._producer is producer and len(made) == 1  # made once, kept
