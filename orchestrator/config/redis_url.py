"""A Redis URL checked as Keel will read it, so a bad ``KEEL_REDIS_URL`` is refused when
settings are read, naming the part, instead of at the first command.

Three topologies, chosen by the scheme (:class:`RedisTopology`):

* one server: ``redis://``, ``rediss://`` (TLS), ``unix://``, as redis-py reads them;
* a Sentinel group: ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]``
  (``rediss+sentinel://`` for TLS). The hosts are the *sentinels* (port 26379 when left
  out), ``service`` the master's name in their configuration, the password the data nodes'
  and, unless ``?sentinel_password=`` says otherwise, none for the sentinels;
* a Redis Cluster: ``redis+cluster://[[user]:password@]host[:port][,host[:port]...]/``
  (``rediss+cluster://`` for TLS). The hosts are some of the cluster's nodes (port 6379
  when left out), from which the client learns the rest; a cluster has database 0 only.

Pure: this module parses; ``orchestrator.io.redis.client_factory`` builds the clients.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import parse_qs, unquote, urlsplit

from orchestrator.config.redaction import clip

#: The largest TCP port.
MAX_PORT = 65_535
#: The port of a sentinel whose address names none (Redis's own default).
DEFAULT_SENTINEL_PORT = 26_379


class RedisScheme(StrEnum):
    """The schemes a Redis URL may have: redis-py's three, and Keel's Sentinel two."""

    REDIS = "redis"
    REDISS = "rediss"
    UNIX = "unix"
    SENTINEL = "redis+sentinel"
    SENTINEL_TLS = "rediss+sentinel"
    CLUSTER = "redis+cluster"
    CLUSTER_TLS = "rediss+cluster"


class RedisTopology(StrEnum):
    """What the URL points at: one server, a master found through sentinels, or a cluster."""

    SINGLE = "single"
    SENTINEL = "sentinel"
    CLUSTER = "cluster"


#: The schemes a Redis URL may have, as a settings error lists them.
REDIS_SCHEMES = tuple(RedisScheme)
_SENTINEL_SCHEMES = (RedisScheme.SENTINEL, RedisScheme.SENTINEL_TLS)
_CLUSTER_SCHEMES = (RedisScheme.CLUSTER, RedisScheme.CLUSTER_TLS)
#: The query arguments a Sentinel URL takes (the rest of a client's options are Keel's).
_SENTINEL_OPTIONS = ("sentinel_password",)
#: The port of a cluster node whose address names none.
DEFAULT_NODE_PORT = 6_379
#: A master's name as sentinels accept it in ``sentinel monitor`` (Keel is stricter).
_SERVICE_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")

#: The query arguments of a Redis URL redis-py reads as numbers (``parse_url``).
_REDIS_NUMBER_ARGUMENTS: dict[str, type[int] | type[float]] = {
    "db": int,
    "socket_read_size": int,
    "max_connections": int,
    "health_check_interval": int,
    "ssl_min_version": int,
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "timeout": float,
}


@dataclass(frozen=True)
class SentinelUrl:
    """A parsed ``redis+sentinel://`` URL. The passwords stay out of ``repr``."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)
    tls: bool = False


@dataclass(frozen=True)
class ClusterUrl:
    """A parsed ``redis+cluster://`` URL: the nodes to start from. The password stays out
    of ``repr``."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False


def scheme_of(url: str) -> str:
    """The part before ``://`` (empty when there is none)."""
    return url.partition("://")[0] if "://" in url else ""


def topology_of(url: str) -> RedisTopology:
    """Which topology a (checked) URL names."""
    scheme = scheme_of(url)
    if scheme in _SENTINEL_SCHEMES:
        return RedisTopology.SENTINEL
    if scheme in _CLUSTER_SCHEMES:
        return RedisTopology.CLUSTER
    return RedisTopology.SINGLE


def check_redis_url(url: str) -> None:
    """Refuse a Redis URL that would fail at its first use, with a ``ValueError`` naming
    the part (redis-py's own is a traceback, e.g. "Port could not be cast")."""
    scheme = scheme_of(url)
    if scheme not in REDIS_SCHEMES:
        raise ValueError(
            "must start with redis://, rediss://, unix://, redis+sentinel://, "
            "rediss+sentinel://, redis+cluster:// or rediss+cluster://"
        )
    if scheme in _SENTINEL_SCHEMES:
        parse_sentinel_url(url)
        return
    if scheme in _CLUSTER_SCHEMES:
        parse_cluster_url(url)
        return
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a malformed [IPv6] host
        raise ValueError(f"is not a URL: {exc}") from None
    if scheme == RedisScheme.UNIX:
        if not parts.path:
            raise ValueError("a unix:// URL needs the socket's path, e.g. unix:///run/redis.sock")
    else:
        address = parts.netloc.rpartition("@")[2].rpartition("]")[2]  # past userinfo, [IPv6]
        _, colon, port = address.partition(":")
        if colon:
            _check_port(port)
        db = unquote(parts.path).replace("/", "")
        if db and not (db.isascii() and db.isdigit()):
            raise ValueError(f"the database {clip(db)!r} (the path) is not a number")
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name in _REDIS_NUMBER_ARGUMENTS:
            for value in values:
                try:
                    _REDIS_NUMBER_ARGUMENTS[name](value)
                except ValueError:
                    raise ValueError(f"?{name}={clip(value)!r} is not a number") from None


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The sentinels, service, database and credentials of a ``redis+sentinel://`` URL;
    a ``ValueError`` naming the wrong part otherwise."""
    scheme, username, password, sentinels, path, query = _split(
        url, _SENTINEL_SCHEMES, "sentinel", DEFAULT_SENTINEL_PORT, "26379,10.0.0.2:26379/mymaster/0"
    )
    service, _, db_text = unquote(path).partition("/")
    if not service:
        raise ValueError(
            f"a {scheme}:// URL names the master's service after the sentinels, "
            f"e.g. {scheme}://10.0.0.1:26379/mymaster/0"
        )
    if not _SERVICE_NAME.fullmatch(service):
        raise ValueError(
            f"the service name {clip(service)!r} may hold only letters, digits, '.', '_' and '-'"
        )
    db_text = db_text.rstrip("/")
    if db_text and not (db_text.isascii() and db_text.isdigit()):
        raise ValueError(f"the database {clip(db_text)!r} (after the service name) is not a number")
    sentinel_password = None
    for name, values in parse_qs(query, keep_blank_values=True).items():
        if name not in _SENTINEL_OPTIONS:
            raise ValueError(
                f"?{clip(name)} is not an option of a {scheme}:// URL "
                f"(it takes only {', '.join(_SENTINEL_OPTIONS)})"
            )
        sentinel_password = values[-1] or None
    return SentinelUrl(
        sentinels=sentinels,
        service=service,
        db=int(db_text or 0),
        username=username,
        password=password,
        sentinel_password=sentinel_password,
        tls=scheme == RedisScheme.SENTINEL_TLS,
    )


def parse_cluster_url(url: str) -> ClusterUrl:
    """The nodes and credentials of a ``redis+cluster://`` URL; a ``ValueError`` naming the
    wrong part otherwise."""
    scheme, username, password, nodes, path, query = _split(
        url, _CLUSTER_SCHEMES, "node", DEFAULT_NODE_PORT, "7000,10.0.0.2:7000/"
    )
    db_text = unquote(path).strip("/")
    if db_text not in ("", "0"):
        raise ValueError(
            f"a {scheme}:// URL names no database (a cluster has database 0 only), "
            f"not {clip(db_text)!r}"
        )
    if query:
        raise ValueError(f"a {scheme}:// URL takes no ?options (Keel sets the client's own)")
    return ClusterUrl(
        nodes=nodes, username=username, password=password, tls=scheme == RedisScheme.CLUSTER_TLS
    )


def _split(
    url: str, schemes: tuple[str, ...], what: str, default_port: int, example: str
) -> tuple[str, str | None, str | None, tuple[tuple[str, int], ...], str, str]:
    """A multi-host URL's scheme (one of ``schemes``), user, password, hosts (``what``: a
    sentinel, a node; at least one), path and query; ``example``: an example URL's end."""
    scheme = scheme_of(url)
    if scheme not in schemes:
        raise ValueError(f"must start with {' or '.join(s + '://' for s in schemes)}")
    rest = url[len(scheme) + 3 :]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon and secret else None
    addresses = tuple(_address(a, what, default_port) for a in hosts.split(",")) if hosts else ()
    if not addresses:
        raise ValueError(
            f"a {scheme}:// URL names at least one {what}, e.g. {scheme}://10.0.0.1:{example}"
        )
    return scheme, username, password, addresses, path, query


def _address(address: str, what: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` as (host, port); ``what`` names the host in
    an error (a sentinel, a node)."""
    if address.startswith("["):
        host, bracket, after = address[1:].partition("]")
        if not bracket:
            raise ValueError(f"the {what} address {clip(address)!r} has no closing ']'")
        colon, port = after[:1], after[1:]
        if after and colon != ":":
            raise ValueError(f"the {what} address {clip(address)!r} has text after its ']'")
    else:
        host, colon, port = address.partition(":")
    if not host:
        raise ValueError(f"the {what} address {clip(address)!r} has no host")
    if not colon:
        return host, default_port
    _check_port(port)
    return host, int(port)


def _check_port(port: str) -> None:
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= MAX_PORT):
        raise ValueError(f"the port {clip(port)!r} is not a number from 1 to {MAX_PORT}")
