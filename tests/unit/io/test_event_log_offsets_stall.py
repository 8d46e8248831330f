"""The orchestrator's transactional log when a transactional call hangs after a broker loss.

librdkafka can leave ``send_offsets_to_transaction`` waiting for good on a group
coordinator whose broker died (its issues #5456, #5511) and hold ``abort_transaction``
until the records queued for that broker time out (docs/operations.md, "Losing a
broker"). ``KafkaEventLog`` gives each call a bound (``STALL_S``; ``COMMIT_STALL_S`` for
a commit, which flushes first) and then abandons it: the caller gets ``CallStalled`` (a
``ProducerReset``: the producer is replaced, fencing the old one), the bounds double for
the next try and return to their start after a commit. Stand-in producers, no broker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from orchestrator.config.settings import Settings
from orchestrator.io.kafka import adapter
from orchestrator.io.kafka.adapter import COMMIT_STALL_S, STALL_GRACE_S, STALL_S, KafkaEventLog
from orchestrator.io.ports import CallStalled, ProducerReset

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
    """Answers each transactional call as told: hang, time out, or succeed."""

    def __init__(self, **answers: list[str]) -> None:
        self.answers = answers
        self.timeouts: dict[str, list[float]] = {}
        self.release = threading.Event()

    def _answer(self, call: str, timeout: float) -> None:
        self.timeouts.setdefault(call, []).append(timeout)
        queue = self.answers.get(call) or ["ok"]
        answer = queue.pop(0) if len(queue) > 1 or call not in self.answers else queue[0]
        if answer == "hang":  # the librdkafka bugs: the timeout is not honoured
            self.release.wait(10)
        elif answer == "timeout":
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))

    def send_offsets_to_transaction(self, offsets: Any, meta: Any, timeout: float) -> None:
        self._answer("send_offsets", timeout)

    def commit_transaction(self, timeout: float) -> None:
        self._answer("commit", timeout)

    def abort_transaction(self, timeout: float) -> None:
        self._answer("abort", timeout)

    def poll(self, timeout: float) -> int:
        return 0


def _log(producer: Producer) -> KafkaEventLog:
    log = KafkaEventLog(SETTINGS, "mem.orchestrator.o", Intake(), stopping=lambda: False)  # type: ignore[arg-type]
    log.caller.slice_s = 0.005
    log._producer = producer  # type: ignore[assignment]
    return log


def test_the_bounds_are_a_quarter_second_and_three_for_a_commit():
    assert (STALL_S, COMMIT_STALL_S, STALL_GRACE_S) == (0.25, 3.0, 0.25)
    producer = Producer()
    _log(producer).commit({0: 7})
    assert producer.timeouts == {"send_offsets": [0.25], "commit": [3.0]}


@pytest.mark.parametrize("call", ["send_offsets", "abort", "commit"])
def test_a_hung_call_is_abandoned_past_its_bound_and_the_bounds_double(monkeypatch, call: str):
    monkeypatch.setattr(adapter, "STALL_S", 0.05)
    monkeypatch.setattr(adapter, "COMMIT_STALL_S", 0.05)
    producer = Producer(**{call: ["hang"]})
    log = _log(producer)
    began = time.monotonic()
    with pytest.raises(CallStalled, match="did not return within"):
        if call == "abort":
            log.abort()
        else:
            log.commit({0: 7})
    took = time.monotonic() - began
    producer.release.set()

    assert isinstance(CallStalled("x"), ProducerReset)  # the orchestrator replaces the producer
    assert producer.timeouts[call] == [0.05]
    assert 0.05 + STALL_GRACE_S <= took < 0.05 + STALL_GRACE_S + 1.0
    assert log.stall_factor == 2 and log.abandoned_calls == 1


def test_a_commit_puts_the_bounds_back():
    producer = Producer()
    log = _log(producer)
    log.stall_factor = 4.0  # after two stalls

    log.commit({0: 7})

    assert producer.timeouts == {"send_offsets": [1.0], "commit": [12.0]}
    assert log.stall_factor == 1.0


def test_a_timeout_the_client_honours_is_retried_on_the_same_producer():
    producer = Producer(send_offsets=["timeout", "timeout", "ok"])
    log = _log(producer)

    log.commit({0: 7})

    assert producer.timeouts == {"send_offsets": [0.25, 0.25, 0.25], "commit": [3.0]}
    assert log.abandoned_calls == 0


def test_the_doubled_bound_stops_at_the_grace_of_every_call(monkeypatch):
    monkeypatch.setattr(adapter, "CALL_GRACE_S", 0.06)
    producer = Producer(send_offsets=["hang"])
    log = _log(producer)
    log.stall_factor = 8.0
    with pytest.raises(CallStalled):
        log.commit({0: 1})
    producer.release.set()
    assert producer.timeouts["send_offsets"] == [0.06]
