"""The effect store in a Sentinel group (handlers/effects.py): every record write is followed,
on the same connection, by ``WAIT`` for a replica, and a write no replica acknowledged in
time is "Redis away" (the worker's gate repeats it). A stand-in client records the calls."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import NoScriptError

from handlers.effects import REPLICA_ACK_TIMEOUT_MS, EffectStore, ReplicaAckMissing
from orchestrator.io.redis.client_factory import REDIS_AWAY


class Script:
    def __init__(self, client: FakeRedis, text: str) -> None:
        self.client, self.script = client, text
        self.sha = f"sha-{len(client.scripts)}"

    def __call__(self, keys: list[str], args: list[Any]) -> Any:
        self.client.calls.append(("script", self.sha, keys[0]))
        return self.client.replies.pop(0)


class Pipeline:
    def __init__(self, client: FakeRedis) -> None:
        self.client = client
        self.commands: list[tuple[Any, ...]] = []

    def evalsha(self, sha: str, numkeys: int, *args: Any) -> None:
        self.commands.append(("evalsha", sha, args[0]))

    def wait(self, replicas: int, timeout_ms: int) -> None:
        self.commands.append(("wait", replicas, timeout_ms))

    def execute(self) -> list[Any]:
        self.client.calls.append(("pipeline", *self.commands))
        reply = self.client.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


class FakeRedis:
    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.calls: list[tuple[Any, ...]] = []
        self.scripts: list[Script] = []

    def register_script(self, text: str) -> Script:
        script = Script(self, text)
        self.scripts.append(script)
        return script

    def pipeline(self, transaction: bool = True) -> Pipeline:
        assert transaction is False, "WAIT must follow the write on its connection, not in MULTI"
        return Pipeline(self)

    def script_load(self, text: str) -> None:
        self.calls.append(("script_load", text == self.scripts[0].script))


def test_one_server_writes_without_waiting_for_replicas() -> None:
    fake = FakeRedis([["run", ""]])
    store = EffectStore(fake, "p")  # type: ignore[arg-type]
    assert store.begin("k", 1, "owner").outcome == "run"
    assert fake.calls == [("script", "sha-0", "keel:p:fx:k")]


def test_in_a_sentinel_group_each_write_waits_for_a_replica_on_its_connection() -> None:
    fake = FakeRedis([[["run", ""], 1], [1, 2]])
    store = EffectStore(fake, "p", replica_acks=1)  # type: ignore[arg-type]
    assert store.begin("k", 1, "owner").outcome == "run"
    store.commit("k", "{}")
    wait = ("wait", 1, REPLICA_ACK_TIMEOUT_MS)
    assert fake.calls == [
        ("pipeline", ("evalsha", "sha-0", "keel:p:fx:k"), wait),
        ("pipeline", ("evalsha", "sha-1", "keel:p:fx:k"), wait),
    ]


def test_a_write_no_replica_acknowledged_is_redis_away() -> None:
    store = EffectStore(FakeRedis([[1, 0]]), "p", replica_acks=1)  # type: ignore[arg-type]
    with pytest.raises(ReplicaAckMissing) as info:
        store.commit("k", "{}")
    assert isinstance(info.value, REDIS_AWAY)
    assert str(info.value) == "0 of 1 replicas acknowledged an effect record within 500 ms"


def test_a_promoted_master_without_the_script_is_given_it_once() -> None:
    fake = FakeRedis([NoScriptError("No matching script"), [["committed", "{}"], 1]])
    store = EffectStore(fake, "p", replica_acks=1)  # type: ignore[arg-type]
    assert store.begin("k", 1, "owner").result_json == "{}"
    assert [c[0] for c in fake.calls] == ["pipeline", "script_load", "pipeline"]
    assert fake.calls[1] == ("script_load", True)
