"""Where LLM nodes keep what they must never ask a model twice for: Redis, by attempt.

Keys live under the topic prefix's root (``orchestrator.io.redis.keyspace``), in a space
of their own, ``llm``, which no rebuild clears (like the effect store ``fx``)::

    keel:<prefix>:llm:call:<index>:<K>    one raw provider response (or tool result)
    keel:<prefix>:llm:start:<K>           when the attempt's first call was made
    keel:<prefix>:llm:wait:<K>            do not call before this time (Retry-After)
    keel:<prefix>:llm:cache:<hash>        cached answers of read-only nodes (own TTL)

``K`` is the task's idempotency key (one logical attempt), so a redelivered task, or a
retry of the same logical attempt, reads the responses already received instead of
sampling again; a new logical attempt (a new key) asks the model again. A record is
written with ``SET NX`` and read back: if two deliveries of one attempt ever raced,
both go on with the same, first stored, response.

While Redis is unreachable no model call is made (nothing could be recorded): the
store waits with backoff for ``REDIS_WAIT_S`` and then fails the attempt as transient.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from handlers.sdk.activity_errors import TransientError
from orchestrator.io.redis.client_factory import REDIS_AWAY, RedisUse, redis_client
from orchestrator.io.redis.keyspace import Keyspace

__all__ = ["CALL_TTL_S", "LlmStore"]

log = logging.getLogger("keel.worker.llm")

T = TypeVar("T")

#: Raw responses outlive any retry horizon of their attempt.
CALL_TTL_S = 14 * 24 * 3600
#: How long a call waits for an unreachable Redis before the attempt fails as transient.
REDIS_WAIT_S = 30.0


class LlmStore:
    def __init__(self, client: redis.Redis, topic_prefix: str, ttl_s: int = CALL_TTL_S) -> None:
        self.r = client
        self.root = Keyspace(topic_prefix).llm
        self.ttl_s = ttl_s

    @classmethod
    def from_url(cls, url: str, topic_prefix: str) -> LlmStore:
        return cls(redis_client(url, RedisUse.WORKER_RECORDS), topic_prefix)

    # -- keys (the variable part last) ------------------------------------------------
    def call_key(self, attempt_key: str, index: int | str) -> str:
        return f"{self.root}:call:{index}:{attempt_key}"

    def start_key(self, attempt_key: str) -> str:
        return f"{self.root}:start:{attempt_key}"

    def wait_key(self, attempt_key: str) -> str:
        return f"{self.root}:wait:{attempt_key}"

    def cache_key(self, content_hash: str) -> str:
        return f"{self.root}:cache:{content_hash}"

    # -- operations ---------------------------------------------------------------------
    async def get_call(self, attempt_key: str, index: int | str) -> dict[str, Any] | None:
        raw = await self._do("read a recorded call", self.r.get, self.call_key(attempt_key, index))
        return None if raw is None else json.loads(raw)

    async def put_call(
        self, attempt_key: str, index: int | str, record: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Store ``record`` unless one is there; (the stored record, whether it is ours)."""
        key = self.call_key(attempt_key, index)
        text = json.dumps(record, separators=(",", ":"))

        def put() -> tuple[bool, str]:
            fresh = bool(self.r.set(key, text, nx=True, ex=self.ttl_s))
            return fresh, text if fresh else str(self.r.get(key))

        fresh, stored = await self._do("record a call", put)
        return json.loads(stored), fresh

    async def started_at(self, attempt_key: str, now: float) -> float:
        """The first call's time of this attempt (``now`` if this is it)."""
        key = self.start_key(attempt_key)

        def get_or_set() -> str:
            self.r.set(key, repr(now), nx=True, ex=self.ttl_s)
            return str(self.r.get(key) or repr(now))

        return float(await self._do("read the attempt's start", get_or_set))

    async def not_before(self, attempt_key: str) -> float:
        raw = await self._do("read Retry-After", self.r.get, self.wait_key(attempt_key))
        return float(raw) if raw else 0.0

    async def set_not_before(self, attempt_key: str, when: float) -> None:
        key = self.wait_key(attempt_key)
        await self._do("record Retry-After", lambda: self.r.set(key, repr(when), ex=86400))

    async def cache_get(self, content_hash: str) -> dict[str, Any] | None:
        raw = await self._do("read the cache", self.r.get, self.cache_key(content_hash))
        return None if raw is None else json.loads(raw)

    async def cache_put(self, content_hash: str, entry: dict[str, Any], ttl_s: int) -> None:
        text = json.dumps(entry, separators=(",", ":"))
        key = self.cache_key(content_hash)
        await self._do("fill the cache", lambda: self.r.set(key, text, ex=ttl_s))

    async def _do(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        delay, waited = 0.05, 0.0
        while True:
            try:
                return await asyncio.to_thread(fn, *args)
            except REDIS_AWAY as exc:
                if waited >= REDIS_WAIT_S:
                    raise TransientError(
                        f"Redis unreachable for {waited:.0f}s ({what}: {type(exc).__name__}); "
                        "no model call is made that could not be recorded"
                    ) from None
                if waited == 0:
                    log.warning("Redis unreachable (%s); LLM calls wait for it", what)
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, 2.0)
