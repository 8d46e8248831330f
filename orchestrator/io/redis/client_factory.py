"""The one factory of Redis clients: every client a Keel process makes (the worker's effect
records, the read model, the connector's dedupe markers, the CLI's claims) comes from
:func:`redis_client` or :func:`async_redis_client`, so one URL picks the topology for all.

* ``redis://``, ``rediss://``, ``unix://``: one server, as redis-py reads the URL;
* ``redis+sentinel://h1:26379,h2:26379/mymaster/0`` (``orchestrator/config/redis_url.py``): the
  master of a Sentinel group. Each new connection asks the sentinels for the master, so
  after a failover the client finds the promoted replica by itself; a connection still
  open to a demoted master gets ``READONLY`` and redis-py closes it, raising a
  ``ConnectionError``. Until a master is elected, connecting raises
  ``MasterNotFoundError`` (a ``ConnectionError`` too);
* ``redis+cluster://n1:7000,n2:7000/``: a Redis Cluster (redis-py's ``RedisCluster``). The
  client learns the slot map from the nodes named and follows ``MOVED``; after a master's
  loss it re-reads the map, and until a replica is promoted a command to that master's
  slots fails with a ``ConnectionError`` or ``CLUSTERDOWN`` (``ClusterDownError``). Keys
  must then keep each script and transaction within one slot: :class:`Keyspace` in cluster
  mode (:func:`is_cluster`) tags them (docs/operations.md, "Redis Cluster").

Every one of these is in :data:`REDIS_AWAY`: "Redis is not there right now, wait and try
again" (the worker's ``RedisGate``), never "this request is wrong".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.retry
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    ClusterDownError,
    RedisClusterUnreachableError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.retry import Retry
from redis.sentinel import Sentinel

from orchestrator.config.redis_url import (
    ClusterUrl,
    RedisTopology,
    SentinelUrl,
    parse_cluster_url,
    parse_sentinel_url,
    topology_of,
)

__all__ = [
    "REDIS_AWAY",
    "REDIS_ERRORS",
    "SENTINEL_TIMEOUT_S",
    "RedisUse",
    "async_redis_client",
    "away_reason",
    "is_cluster",
    "redis_client",
]

#: The errors that mean "Redis is unreachable right now", not "this request is wrong":
#: a lost connection or a timeout, no master known to the sentinels yet
#: (``MasterNotFoundError``, a ``ConnectionError``), and a write refused by a demoted
#: master (``ReadOnlyError``; redis-py turns it into a ``ConnectionError`` on a Sentinel
#: client, but a script's or a plain client's reaches the caller as is). In a cluster:
#: a slot whose master is lost and not yet replaced (``CLUSTERDOWN``, ``MASTERDOWN``,
#: ``TRYAGAIN``, no node known for the slot, no node reachable to re-read the map).
REDIS_AWAY: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.ReadOnlyError,
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,
    RedisClusterUnreachableError,
)

#: Every error a Redis client raises: redis-py's ``RedisError`` and the cluster client's
#: own that do not derive from it (no node for a slot, no node reachable).
REDIS_ERRORS: tuple[type[Exception], ...] = (
    redis.RedisError,
    SlotNotCoveredError,
    RedisClusterUnreachableError,
)

#: redis-py's repr of a sentinel's client inside ``MasterNotFoundError``'s message (ends
#: with the three closing brackets of client, pool and connection).
_SENTINEL_CLIENT = re.compile(
    r"<redis\.(?:asyncio\.)?client\.Redis\(.*?,host=([^,]+),port=(\d+),.*?\)>\)>\)>"
)

#: How long a question to one sentinel may take: a master lookup asks them in turn, so a
#: sentinel that does not answer must not hold up the next.
SENTINEL_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Waits:
    """How long a client waits for a connection and for a reply, and how often redis-py
    retries a command itself (None: its default, exponential backoff)."""

    connect_s: float
    read_s: float
    retries: int | None = None
    health_check_s: int = 0


class RedisUse(Enum):
    """What a client is for, which sets its :class:`Waits`."""

    #: the worker's effect records, type limits and model calls: fail fast, the worker's
    #: ``RedisGate`` waits out an outage
    WORKER_RECORDS = Waits(connect_s=2.0, read_s=2.0, retries=1)
    #: the read model and human-task inbox (projector, client, CLI): bounded waits, so an
    #: unreachable server is an error, not a hang
    READ_MODEL = Waits(connect_s=5.0, read_s=15.0, health_check_s=30)
    #: an operator's one-off claims (dead-letter redrive and discard)
    OPERATOR = Waits(connect_s=5.0, read_s=5.0)
    #: the connector's webhook dedupe markers (async, a pool of its own)
    WEBHOOK_DEDUPE = Waits(connect_s=2.0, read_s=5.0)
    #: "does Redis answer?" (``keel infra``)
    PROBE = Waits(connect_s=1.0, read_s=1.0, retries=0)


def away_reason(exc: BaseException) -> str:
    """A Redis error as one short line: a master lookup that failed names each sentinel by
    its address, not by redis-py's repr of its client (a screenful of options)."""
    return _SENTINEL_CLIENT.sub(r"sentinel \1:\2", str(exc))


def is_cluster(client: object) -> bool:
    """Whether ``client`` (sync or async) talks to a Redis Cluster: its keys are then
    hash-tagged (``Keyspace(..., clustered=True)``)."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def redis_client(url: str, use: RedisUse, *, decode_responses: bool = True) -> redis.Redis:
    """A client of the Redis at ``url`` (a checked URL: ``orchestrator.config.redis_url``), of
    the master of the Sentinel group it names, or of the cluster it names (typed as
    ``redis.Redis``: the commands Keel sends are the same)."""
    options = _options(use, decode_responses)
    if use.value.retries is not None:
        options["retry"] = Retry(NoBackoff(), use.value.retries)
    topology = topology_of(url)
    if topology is RedisTopology.SENTINEL:
        return cast("redis.Redis", _master_of(Sentinel, url, options))
    if topology is RedisTopology.CLUSTER:
        target = parse_cluster_url(url)
        nodes = [ClusterNode(host, port) for host, port in target.nodes]
        options.update(_cluster_login(target))
        return cast("redis.Redis", RedisCluster(startup_nodes=nodes, **options))
    return redis.Redis.from_url(url, **options)


def async_redis_client(
    url: str,
    use: RedisUse,
    *,
    max_connections: int | None = None,
    decode_responses: bool = False,
) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`redis_client` (the connector's)."""
    options = _options(use, decode_responses)
    if max_connections is not None:
        options["max_connections"] = max_connections
    if use.value.retries is not None:
        options["retry"] = redis.asyncio.retry.Retry(NoBackoff(), use.value.retries)
    topology = topology_of(url)
    if topology is RedisTopology.SENTINEL:
        return cast("redis.asyncio.Redis", _master_of(AsyncSentinel, url, options))
    if topology is RedisTopology.CLUSTER:
        target = parse_cluster_url(url)
        nodes = [AsyncClusterNode(host, port) for host, port in target.nodes]
        options.update(_cluster_login(target))
        return cast("redis.asyncio.Redis", AsyncRedisCluster(startup_nodes=nodes, **options))
    return redis.asyncio.Redis.from_url(url, **options)


def _options(use: RedisUse, decode_responses: bool) -> dict[str, Any]:
    """A client's options from its use's waits (the same for both topologies)."""
    waits = use.value
    return {
        "decode_responses": decode_responses,
        "socket_connect_timeout": waits.connect_s,
        "socket_timeout": waits.read_s,
        "health_check_interval": waits.health_check_s,
    }


def _master_of(sentinel_class: type[Any], url: str, options: dict[str, Any]) -> Any:
    """The client of the master the sentinels of a ``redis+sentinel://`` URL name."""
    target = parse_sentinel_url(url)
    sentinel = sentinel_class(
        target.sentinels,
        sentinel_kwargs=_sentinel_options(target),
        **_node_options(target),
        **options,
    )
    return sentinel.master_for(target.service)


def _cluster_login(target: ClusterUrl) -> dict[str, Any]:
    """How to log in to every node of a cluster: the URL's user and password, TLS."""
    return _login(target.username, target.password, target.tls)


def _node_options(target: SentinelUrl) -> dict[str, Any]:
    """How to log in to the master (and its replicas): the URL's user, password, database."""
    return {"db": target.db, **_login(target.username, target.password, target.tls)}


def _login(username: str | None, password: str | None, tls: bool) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if username:
        options["username"] = username
    if password is not None:
        options["password"] = password
    if tls:
        options["ssl"] = True
    return options


def _sentinel_options(target: SentinelUrl) -> dict[str, Any]:
    """How to ask a sentinel: briefly (:data:`SENTINEL_TIMEOUT_S`), with its own password."""
    options: dict[str, Any] = {
        "socket_connect_timeout": SENTINEL_TIMEOUT_S,
        "socket_timeout": SENTINEL_TIMEOUT_S,
    }
    if target.sentinel_password is not None:
        options["password"] = target.sentinel_password
    if target.tls:
        options["ssl"] = True
    return options
