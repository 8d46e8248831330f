"""Which producer each client call uses: single commands go out at once, batches linger."""

from __future__ import annotations

from typing import Any

from orchestrator.client.client import KeelClient
from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import CancelWorkflow
from tests.integration.local_app import app


class FakeProducer:
    """Records produces and flushes; empty-queued, so falsy like an idle librdkafka one."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.flushes = 0

    def produce(self, topic: str, key: bytes, value: bytes, **_: Any) -> None:
        assert topic == "t.commands"
        self.keys.append(key)

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        return 0

    def poll(self, timeout: float) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def _client() -> tuple[KeelClient, FakeProducer, FakeProducer]:
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", redis_url="redis://127.0.0.1:1/0", topic_prefix="t"
    )
    client = KeelClient(settings, app)
    single, bulk = FakeProducer(), FakeProducer()
    client._producer, client._bulk_producer = single, bulk  # type: ignore[assignment]
    return client, single, bulk


def test_start_many_produces_through_the_lingering_producer_and_flushes_it_once() -> None:
    client, single, bulk = _client()
    client.start_many("three_step_local", [(f"wf-{i}", {"n": i}) for i in range(3)])
    assert bulk.keys == [b"wf-0", b"wf-1", b"wf-2"] and bulk.flushes == 1
    assert single.keys == [] and single.flushes == 0


def test_a_single_command_goes_through_the_producer_without_linger() -> None:
    client, single, bulk = _client()
    client.send("wf-9", CancelWorkflow("no longer needed"))
    assert single.keys == [b"wf-9"] and single.flushes == 1
    assert bulk.keys == [] and bulk.flushes == 0
