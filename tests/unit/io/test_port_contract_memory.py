"""The runtime ports' contract, on the in-memory adapter."""

from __future__ import annotations

import pytest

from orchestrator.io.memory import (
    MemoryBroker,
    MemoryCommandIntake,
    MemoryEventLog,
    MemoryGroupIntake,
    MemoryOutcomeSink,
    MemoryReadModel,
)
from tests.runtime_contract import Harness, RuntimeContract


class MemoryHarness(Harness):
    partitions = 4
    commands = "c.commands"
    events = "c.events"

    def __init__(self) -> None:
        self.broker = MemoryBroker(self.partitions)

    def intake(self) -> MemoryCommandIntake:
        intake = MemoryCommandIntake(self.broker, self.commands, "c.group")
        intake.subscribe(lambda owned: None, lambda gone: None)
        return intake

    def log(self, intake, transactional_id: str) -> MemoryEventLog:
        return MemoryEventLog(self.broker, transactional_id, intake)

    def produce(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        self.broker.produce(topic, value, key, partition=partition)

    def read(self, topic: str):
        return self.broker.records(topic)

    def group_intake(self, topic: str, group_id: str) -> MemoryGroupIntake:
        intake = MemoryGroupIntake(self.broker, topic, group_id)
        intake.subscribe(lambda owned: None, lambda gone: None)
        return intake

    def sink(self) -> MemoryOutcomeSink:
        return MemoryOutcomeSink(self.broker)

    def store(self) -> MemoryReadModel:
        return MemoryReadModel(self.broker)


class TestMemoryAdapter(RuntimeContract):
    @pytest.fixture
    def harness(self) -> MemoryHarness:
        return MemoryHarness()
