"""The dedupe's Redis connections: a burst waits for a free one instead of failing, and only
a wait past the bound is a 503, worded as the connector being busy, not Redis down."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from connectors.delivery import MAX_REDIS_CONNECTIONS, ClaimState, Dedupe
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.io.redis.keyspace import Keyspace


class _SlowRedis:
    """Answers ``SET NX`` once ``gate`` opens; counts the commands in flight."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.in_flight = self.most_in_flight = 0

    def register_script(self, _text: str) -> Any:
        return None

    async def set(self, *_args: Any, **_kwargs: Any) -> bool:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            return True
        finally:
            self.in_flight -= 1


def test_a_burst_queues_for_connections_and_all_claims_go_through() -> None:
    async def run() -> tuple[list[ClaimState], int]:
        redis = _SlowRedis()
        dedupe = Dedupe(redis, Keyspace("t"), lock_s=5, wait_s=5)  # type: ignore[arg-type]
        claims = [asyncio.create_task(dedupe.claim("s", f"e{i}")) for i in range(150)]
        await asyncio.sleep(0.05)
        redis.gate.set()
        return [c.state for c in await asyncio.gather(*claims)], redis.most_in_flight

    states, most = asyncio.run(run())
    assert states == [ClaimState.CLAIMED] * 150
    assert most == MAX_REDIS_CONNECTIONS


def test_no_connection_free_within_the_wait_is_a_busy_503() -> None:
    async def run() -> None:
        redis = _SlowRedis()
        dedupe = Dedupe(redis, Keyspace("t"), lock_s=5, wait_s=0.2)  # type: ignore[arg-type]
        held = [asyncio.create_task(dedupe.claim("s", f"e{i}")) for i in range(64)]
        await asyncio.sleep(0.05)
        try:
            await dedupe.claim("s", "one-too-many")
        finally:
            redis.gate.set()
            await asyncio.gather(*held)

    with pytest.raises(UnavailableError) as refused:
        asyncio.run(run())
    assert str(refused.value) == (
        "the connector is busy: none of its 64 Redis connections came free within 0.2 s"
    )


class _LostCluster(_SlowRedis):
    """A cluster client whose slot map names no reachable node (not a ``RedisError``)."""

    async def set(self, *_args: Any, **_kwargs: Any) -> bool:
        from redis.exceptions import RedisClusterUnreachableError

        raise RedisClusterUnreachableError("Redis Cluster cannot be connected")


def test_a_cluster_with_no_node_reachable_is_redis_unavailable_not_a_crash() -> None:
    dedupe = Dedupe(_LostCluster(), Keyspace("t"), lock_s=5, wait_s=1)  # type: ignore[arg-type]
    with pytest.raises(UnavailableError) as info:
        asyncio.run(dedupe.claim("s", "e1"))
    assert str(info.value) == (
        "Redis is unavailable: RedisClusterUnreachableError: Redis Cluster cannot be connected"
    )
