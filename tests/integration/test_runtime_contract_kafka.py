"""The runtime ports' contract, on the Kafka adapter and the real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from orchestrator.io.kafka.adapter import KafkaCommandIntake, KafkaEventLog, KafkaGroupIntake
from orchestrator.io.kafka.clients import to_record
from orchestrator.io.kafka.outcomes import KafkaOutcomeSink
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from orchestrator.projector.projector import RedisReadModelStore
from tests.runtime_contract import Harness, RuntimeContract
from tests.support import read_topic

# The contract writes raw test bytes to the events topic as a generic log, not histories.
pytestmark = pytest.mark.unsound_history


class KafkaHarness(Harness):
    def __init__(self, settings) -> None:
        self.settings = settings
        self.partitions = settings.partitions
        self.commands = settings.topic("commands")
        self.events = settings.topic("events")
        self._closers: list = []

    def intake(self) -> KafkaCommandIntake:
        intake = KafkaCommandIntake(
            self.settings,
            self.commands,
            f"{self.settings.topic_prefix}.contract",
            instance_id=None,
            stopping=lambda: False,
        )
        owned: list[int] = []
        intake.subscribe(owned.extend, lambda gone: None)
        for _ in range(300):
            if owned:
                break
            intake.poll(1, 0.1)
        assert sorted(owned) == list(range(self.partitions)), "the intake got no assignment"
        intake.rewind_to_committed(owned)  # whatever the waiting polls read is read again
        return intake

    def log(self, intake, transactional_id: str) -> KafkaEventLog:
        log = KafkaEventLog(
            self.settings,
            f"{self.settings.topic_prefix}.{transactional_id}",
            intake,
            stopping=lambda: False,
        )
        return log  # its producer is made at its first transaction, or by ``open``

    def produce(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        p = Producer({"bootstrap.servers": self.settings.kafka_servers})
        p.produce(topic, key=key, value=value, partition=partition)
        assert p.flush(30) == 0

    def read(self, topic: str):
        return [
            to_record(m) for m in read_topic(self.settings.kafka_servers, topic, self.partitions)
        ]

    def group_intake(self, topic: str, group_id: str) -> KafkaGroupIntake:
        intake = KafkaGroupIntake(
            self.settings,
            topic,
            f"{self.settings.topic_prefix}.{group_id}",
            stopping=lambda: False,
        )
        intake.subscribe(lambda owned: None, lambda gone: None)
        for _ in range(300):
            if intake.assignment:
                break
            intake.poll(1, 0.1)
        assert sorted(intake.assignment) == list(range(self.partitions)), "no assignment"
        intake.rewind_to_committed(sorted(intake.assignment))
        return intake

    def sink(self) -> KafkaOutcomeSink:
        return KafkaOutcomeSink(self.settings, stopping=lambda: False)

    def store(self) -> RedisReadModelStore:
        s = self.settings
        return RedisReadModelStore(
            redis_client(s.redis, RedisUse.READ_MODEL), s.topic_prefix, s.redis
        )


class TestKafkaAdapter(RuntimeContract):
    @pytest.fixture
    def harness(self, settings) -> KafkaHarness:
        return KafkaHarness(settings)
