"""The cache of read-only LLM nodes: a content hash of everything that shapes the answer.

The key covers the prompt (name, version and the digest of its text), the model, the
call parameters, the version of every tool the node may use, the output schema's name
and version, the data version the input was read at, and the input itself. Leave any
of them out and a stale answer would pass for a fresh one; so any change misses. A hit
is recorded in the node's result as ``{"status": "hit", "key": <hash>}``, so replay
reads the history, never the cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.fingerprint import canonical_json

__all__ = ["CachePolicy", "CacheStatus", "content_hash"]


class CacheStatus:
    """Values of ``llm.cache.status`` in a node's record."""

    OFF = "off"
    HIT = "hit"
    MISS = "miss"


@dataclass(frozen=True)
class CachePolicy:
    """Cache a read-only node's accepted answers for ``ttl_s`` seconds."""

    ttl_s: int = 3600

    def __post_init__(self) -> None:
        if not isinstance(self.ttl_s, int) or self.ttl_s < 1:
            raise DefinitionError(f"CachePolicy.ttl_s must be an int >= 1, got {self.ttl_s!r}")


def content_hash(
    *,
    prompt: dict[str, Any],
    model: str,
    parameters: dict[str, Any],
    tools: list[dict[str, str]],
    schema: dict[str, Any],
    data_version: str | None,
    input_value: Any,
) -> str:
    """SHA-256 of the canonical JSON of every part that shapes the answer."""
    body = canonical_json(
        {
            "prompt": prompt,
            "model": model,
            "parameters": parameters,
            "tools": sorted(tools, key=lambda t: (t["name"], t["version"])),
            "schema": schema,
            "data_version": data_version,
            "input": input_value,
        }
    )
    return hashlib.sha256(body.encode()).hexdigest()
