"""A Redis URL checked as redis-py will read it, so a bad ``KEEL_REDIS_URL`` is refused
when settings are read, naming the part, instead of at the first command."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from orchestrator.redaction import clip

#: The largest TCP port.
MAX_PORT = 65_535
#: The schemes a Redis URL may have (redis-py's).
REDIS_SCHEMES = ("redis", "rediss", "unix")


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


def check_redis_url(url: str) -> None:
    """Refuse a Redis URL that redis-py would fail on at its first use, with a
    ``ValueError`` naming the part (its own is a traceback, e.g. "Port could not be cast")."""
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in REDIS_SCHEMES:
        raise ValueError("must start with redis://, rediss:// or unix://")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a malformed [IPv6] host
        raise ValueError(f"is not a URL: {exc}") from None
    if scheme == "unix":
        if not parts.path:
            raise ValueError("a unix:// URL needs the socket's path, e.g. unix:///run/redis.sock")
    else:
        address = parts.netloc.rpartition("@")[2].rpartition("]")[2]  # past userinfo, [IPv6]
        _, colon, port = address.partition(":")
        if colon and not (port.isascii() and port.isdigit() and 1 <= int(port) <= MAX_PORT):
            raise ValueError(f"the port {clip(port)!r} is not a number from 1 to {MAX_PORT}")
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
