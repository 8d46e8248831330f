"""A plain producer is connected before it is returned (``clients.plain_producer``): an
idempotent producer made without a connection waits 500 ms for its producer id, and its
first record with it (docs/performance.md, "Where a remote run's time goes")."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from orchestrator.config.settings import Settings
from orchestrator.io.kafka import clients


class FakeProducer:
    made: list[FakeProducer] = []
    refuse = False

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.calls: list[tuple[str, float]] = []
        FakeProducer.made.append(self)

    def list_topics(self, timeout: float) -> object:
        self.calls.append(("list_topics", timeout))
        if FakeProducer.refuse:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
        return object()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeProducer]:
    FakeProducer.made = []
    FakeProducer.refuse = False
    monkeypatch.setattr(clients, "Producer", FakeProducer)
    return FakeProducer


def test_a_plain_producer_asks_for_metadata_before_it_is_returned(fake) -> None:
    s = Settings(bootstrap_servers="10.0.0.1:9092", topic_prefix="t", admin_timeout_s=30)
    made = clients.plain_producer(s, **{"linger.ms": 0})
    p = FakeProducer.made[0]
    assert made is p  # type: ignore[comparison-overlap]
    assert p.calls == [("list_topics", clients.CONNECT_FIRST_S)]
    assert p.config["linger.ms"] == 0 and p.config["enable.idempotence"] is True


def test_a_broker_that_does_not_answer_is_left_to_the_first_send(fake, caplog) -> None:
    fake.refuse = True
    s = Settings(bootstrap_servers="10.0.0.1:9092", topic_prefix="t", admin_timeout_s=0.5)
    with caplog.at_level("INFO", logger="keel.kafka"):
        clients.plain_producer(s)
    p = FakeProducer.made[0]
    assert p.calls == [("list_topics", 0.5)]  # bounded by the admin timeout when shorter
    assert "a new producer found no broker yet" in caplog.text
