"""The one Redis client factory (orchestrator/io/redis/client_factory.py): a URL picks one server
or a Sentinel group's master, with the waits of the client's use. No server is contacted."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.exceptions import (
    ClusterCrossSlotError,
    ClusterDownError,
    MasterDownError,
    RedisClusterUnreachableError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.sentinel import MasterNotFoundError, SentinelConnectionPool

from orchestrator.io.redis.client_factory import (
    REDIS_AWAY,
    SENTINEL_TIMEOUT_S,
    RedisUse,
    async_redis_client,
    away_reason,
    is_cluster,
    redis_client,
)

SENTINEL_URL = "redis+sentinel://keel:S3cr3t@s1:26380,s2/keel-master/2?sentinel_password=T0p"


def test_a_plain_url_is_one_server_with_the_waits_of_its_use() -> None:
    client = redis_client("redis://h:6380/1", RedisUse.READ_MODEL)
    pool = client.connection_pool
    assert type(pool) is redis.ConnectionPool
    kwargs = pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 6380, 1)
    assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"]) == (5.0, 15.0)
    assert kwargs["health_check_interval"] == 30
    assert client.get_encoder().decode_responses is True


def test_a_sentinel_url_is_its_services_master_found_through_the_sentinels() -> None:
    client = redis_client(SENTINEL_URL, RedisUse.WORKER_RECORDS)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "keel-master" and pool.is_master
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (2, "keel", "S3cr3t")
    assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"]) == (2.0, 2.0)
    assert kwargs["retry"].get_retries() == 1
    sentinels = pool.sentinel_manager.sentinels
    addresses = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in sentinels
    ]
    assert addresses == [("s1", 26380), ("s2", 26379)]
    sentinel_kwargs = sentinels[0].connection_pool.connection_kwargs
    assert sentinel_kwargs["password"] == "T0p"
    assert sentinel_kwargs["socket_timeout"] == SENTINEL_TIMEOUT_S


def test_the_passwords_stay_out_of_the_clients_repr() -> None:
    client = redis_client(SENTINEL_URL, RedisUse.OPERATOR)
    shown = repr(client) + repr(client.connection_pool.sentinel_manager)
    assert "keel-master" in shown and "S3cr3t" not in shown and "T0p" not in shown


def test_the_connectors_async_client_takes_the_same_url() -> None:
    plain = async_redis_client("redis://h/0", RedisUse.WEBHOOK_DEDUPE, max_connections=7)
    assert plain.connection_pool.max_connections == 7
    client = async_redis_client(SENTINEL_URL, RedisUse.WEBHOOK_DEDUPE, max_connections=7)
    pool = client.connection_pool
    assert isinstance(pool, AsyncSentinelPool)
    assert (pool.service_name, pool.max_connections) == ("keel-master", 7)
    assert pool.connection_kwargs["password"] == "S3cr3t"
    asyncio.run(client.aclose())
    asyncio.run(plain.aclose())


def test_no_sentinel_answering_is_redis_away() -> None:
    """Nothing listens on port 1: the master lookup fails as ``MasterNotFoundError``, which
    the worker's gate and the read model treat as an outage."""
    client = redis_client("redis+sentinel://127.0.0.1:1/keel/0", RedisUse.PROBE)
    with pytest.raises(MasterNotFoundError) as info:
        client.ping()
    assert isinstance(info.value, REDIS_AWAY)


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("lost"),
        redis.TimeoutError("slow"),
        redis.ReadOnlyError("You can't write against a read only replica."),
        MasterNotFoundError("No master found for 'keel'"),
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        MasterDownError("MASTERDOWN Link with MASTER is down"),
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
        SlotNotCoveredError("Slot 3 not covered by the cluster"),
    ],
)
def test_failover_errors_are_redis_away(error: Exception) -> None:
    assert isinstance(error, REDIS_AWAY)


def test_a_wrong_request_is_not_redis_away() -> None:
    assert not isinstance(redis.ResponseError("WRONGTYPE"), REDIS_AWAY)
    assert not isinstance(ClusterCrossSlotError("CROSSSLOT Keys in request"), REDIS_AWAY)


def test_a_cluster_url_is_a_cluster_client_of_its_nodes_with_the_waits_of_its_use() -> None:
    """The async client reads the slot map at its first command, so none is contacted."""
    url = "redis+cluster://keel:S3cr3t@n1:7000,n2/"
    client = async_redis_client(url, RedisUse.WEBHOOK_DEDUPE, max_connections=7)
    assert isinstance(client, AsyncRedisCluster) and is_cluster(client)
    start = client.nodes_manager.startup_nodes
    assert sorted(start) == ["n1:7000", "n2:6379"]
    node = start["n1:7000"]
    kwargs = node.connection_kwargs
    assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"]) == (2.0, 5.0)
    assert node.max_connections == 7
    assert (kwargs["username"], kwargs["password"]) == ("keel", "S3cr3t")
    assert "S3cr3t" not in repr(client)
    asyncio.run(client.aclose())
    assert not is_cluster(async_redis_client("redis://h/0", RedisUse.WEBHOOK_DEDUPE))


def test_no_cluster_node_answering_is_redis_away() -> None:
    """The sync client reads the slot map when made: with no node there, that is an outage
    (a process started then fails at start, as ``keel infra`` would report)."""
    with pytest.raises(REDIS_AWAY) as info:
        redis_client("redis+cluster://127.0.0.1:1/", RedisUse.PROBE)
    assert isinstance(info.value, RedisClusterUnreachableError)


def test_a_failed_master_lookup_names_each_sentinel_in_one_short_line() -> None:
    client = redis_client("redis+sentinel://:S3cr3t@127.0.0.1:1,127.0.0.1:2/keel/0", RedisUse.PROBE)
    with pytest.raises(MasterNotFoundError) as info:
        client.ping()
    assert len(str(info.value)) > 1000  # redis-py's repr of each sentinel's client
    assert away_reason(info.value) == (
        "No master found for 'keel' : "
        "sentinel 127.0.0.1:1 - network:ConnectionError: Error 111 connecting to 127.0.0.1:1. "
        "Connection refused., "
        "sentinel 127.0.0.1:2 - network:ConnectionError: Error 111 connecting to 127.0.0.1:2. "
        "Connection refused."
    )


def test_the_connectors_failed_lookup_is_one_short_line_too() -> None:
    async def ping() -> BaseException:
        client = async_redis_client("redis+sentinel://127.0.0.1:1/keel/0", RedisUse.PROBE)
        try:
            await client.ping()
        except REDIS_AWAY as exc:
            return exc
        finally:
            await client.aclose()
        raise AssertionError("no error from a sentinel that does not listen")

    reason = away_reason(asyncio.run(ping()))
    assert reason.startswith("No master found for 'keel' : sentinel 127.0.0.1:1 - ")
    assert len(reason) < 200
