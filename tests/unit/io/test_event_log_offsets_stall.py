"""The orchestrator's transactional log when ``send_offsets_to_transaction`` hangs.

librdkafka can leave that call waiting for good on a group coordinator whose broker died
(its issues #5456, #5511; docs/operations.md, "Losing a broker"). ``KafkaEventLog`` gives it
``offsets_stall_s`` and then abandons it: the caller gets ``CallStalled`` (a
``ProducerReset``: the producer is replaced, fencing the old one), the bound doubles for
the next try and returns to its start after a commit. Stand-in producers, no broker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from orchestrator.io.kafka.adapter import OFFSETS_STALL_S, STALL_GRACE_S, KafkaEventLog
from orchestrator.io.ports import CallStalled, ProducerReset
from orchestrator.settings import Settings

SETTINGS = Settings(
    topic_prefix="mem",
    partitions=4,
    bootstrap_servers="127.0.0.1:1",
    redis_url="redis://127.0.0.1:1/0",
)


class Intake:
    topic = "mem.commands"

    def group_metadata(self) -> str:
        return "group-metadata"


class Producer:
    """Answers ``send_offsets_to_transaction`` as told: hang, time out, or succeed."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.timeouts: list[float] = []
        self.release = threading.Event()
        self.commits = 0

    def send_offsets_to_transaction(self, offsets: Any, meta: Any, timeout: float) -> None:
        self.timeouts.append(timeout)
        answer = self.answers.pop(0) if self.answers else "ok"
        if answer == "hang":  # the librdkafka bug: the timeout is not honoured
            self.release.wait(10)
        elif answer == "timeout":
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))

    def commit_transaction(self, timeout: float) -> None:
        self.commits += 1

    def poll(self, timeout: float) -> int:
        return 0


def _log(producer: Producer) -> KafkaEventLog:
    log = KafkaEventLog(SETTINGS, "mem.orchestrator.o", Intake(), stopping=lambda: False)  # type: ignore[arg-type]
    log.caller.slice_s = 0.005
    log._producer = producer  # type: ignore[assignment]
    return log


def test_a_hung_send_offsets_is_abandoned_past_its_bound_and_the_bound_doubles():
    producer = Producer("hang")
    log = _log(producer)
    log.offsets_stall_s = 0.05
    began = time.monotonic()
    with pytest.raises(CallStalled, match="send_offsets_to_transaction did not return within"):
        log.commit({0: 7})
    took = time.monotonic() - began
    producer.release.set()

    assert isinstance(CallStalled("x"), ProducerReset)  # the orchestrator replaces the producer
    assert producer.timeouts == [0.05]
    assert 0.05 + STALL_GRACE_S <= took < 0.05 + STALL_GRACE_S + 1.0
    assert producer.commits == 0
    assert log.offsets_stall_s == 0.1
    assert log.abandoned_calls == 1


def test_the_bound_starts_at_a_second_and_returns_there_after_a_commit():
    producer = Producer()
    log = _log(producer)
    assert log.offsets_stall_s == OFFSETS_STALL_S == 1.0
    log.offsets_stall_s = 12.0  # after a few stalls

    log.commit({0: 7})

    assert producer.timeouts == [12.0] and producer.commits == 1
    assert log.offsets_stall_s == OFFSETS_STALL_S


def test_a_timeout_the_client_honours_is_retried_on_the_same_producer():
    producer = Producer("timeout", "timeout")
    log = _log(producer)

    log.commit({0: 7})

    assert producer.timeouts == [1.0, 1.0, 1.0]
    assert producer.commits == 1 and log.abandoned_calls == 0


def test_the_doubled_bound_stops_at_the_grace_of_every_call(monkeypatch):
    from orchestrator.io.kafka import adapter

    monkeypatch.setattr(adapter, "CALL_GRACE_S", 0.06)
    producer = Producer("hang")
    log = _log(producer)
    log.offsets_stall_s = 0.05
    with pytest.raises(CallStalled):
        log.commit({0: 1})
    producer.release.set()
    assert log.offsets_stall_s == 0.06
