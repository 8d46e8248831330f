"""Who may decide human tasks: actors with a bearer token each, configured as sha256 hashes.

``KEEL_ACTORS_FILE`` names a JSON or TOML file (``.toml``) of

    {"alice": {"token_sha256": "<64 hex>", "roles": ["finance-approver"]}, ...}

Only the sha256 of each token is configured, so the file gives nothing away. A request's
``Authorization: Bearer <token>`` is hashed and compared in constant time against every
actor's hash (each compared, none skipped), so timing tells nothing of which nor how much
matched. ``keel human-tasks decide --actor A`` acts as actor ``A`` of the same file (an operator
with access to Kafka needs no bearer token). docs/connector.md shows how to make one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.domain.model.errors import ConfigError

__all__ = ["Actor", "Actors", "hash_token"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: The longest bearer token looked at (a longer one is refused unhashed).
MAX_TOKEN_CHARS = 512


def hash_token(token: str) -> str:
    """The sha256 hex of a bearer token: what the actors file holds."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Actor:
    name: str
    roles: tuple[str, ...]
    token_sha256: str

    def __repr__(self) -> str:  # the hash is not secret, but keep it out of reprs anyway
        return f"Actor({self.name!r}, roles={list(self.roles)!r})"


class Actors:
    """The configured actors (empty when none are configured: every request is 401)."""

    def __init__(self, actors: Mapping[str, Actor], source: str = "") -> None:
        self.actors = dict(actors)
        self.source = source

    def __len__(self) -> int:
        return len(self.actors)

    @classmethod
    def load(cls, path: Path | None) -> Actors:
        """Read and check the actors file; ``ConfigError`` names the first problem."""
        if path is None:
            return cls({}, "")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"KEEL_ACTORS_FILE '{path}' cannot be read: {why}") from None
        try:
            data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"KEEL_ACTORS_FILE '{path}' is not valid: {exc}") from None
        return cls(_parse(data, str(path)), str(path))

    def get(self, name: str) -> Actor | None:
        return self.actors.get(name)

    def authenticate(self, authorization: str | None) -> Actor | None:
        """The actor whose token the ``Authorization`` header carries, or None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
            return None
        presented = hash_token(token)
        found = None
        for actor in self.actors.values():  # every one compared: no early exit
            if hmac.compare_digest(presented, actor.token_sha256):
                found = actor
        return found


def _parse(data: Any, where: str) -> dict[str, Actor]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected an object of actors by name")
    actors: dict[str, Actor] = {}
    hashes: set[str] = set()
    for name, spec in data.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(
                f"{where}: actor name {str(name)[:64]!r} must be 1-64 letters, digits or ._@+-"
            )
        if not isinstance(spec, dict) or set(spec) - {"token_sha256", "roles"}:
            raise ConfigError(f"{where}: actor '{name}' takes only token_sha256 and roles")
        digest = spec.get("token_sha256")
        if not isinstance(digest, str) or not _HEX64.match(digest.lower()):
            raise ConfigError(
                f"{where}: actor '{name}': token_sha256 must be the 64-hex sha256 of its token"
            )
        roles = spec.get("roles", [])
        if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
            raise ConfigError(f"{where}: actor '{name}': roles must be a list of names")
        if digest.lower() in hashes:
            raise ConfigError(f"{where}: actor '{name}' shares its token with another actor")
        hashes.add(digest.lower())
        actors[name] = Actor(name, tuple(roles), digest.lower())
    return actors
