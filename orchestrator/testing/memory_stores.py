"""The Redis records the worker keeps, in dicts, for the in-process test environment.

A ``@side_effect`` handler's effect claims (``handlers.effects.EffectStore``) and an LLM
step's recorded calls (``handlers.llm.store.LlmStore``) live in Redis in a deployment; the
test kit gives the worker and the engine these stand-ins instead, through their
constructors, so a test needs no Redis and the claim rules stay the real ones: a
redelivered attempt returns the recorded result, an attempt dispatched twice is in doubt.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from handlers.effects import Claim, ClaimOutcome

__all__ = ["MemoryCallStore", "MemoryEffectBook"]


@dataclass
class _Effect:
    state: str  # pending | committed | refused | released
    top: int
    owner: str | None
    result_json: str | None = None
    error_type: str | None = None
    message: str | None = None


class MemoryEffectBook:
    """The effect store's claim rules (``handlers/effects.py``) over a dict, thread-safe:
    the worker calls it from a thread (``RedisGate.call``)."""

    def __init__(self) -> None:
        self._effects: dict[str, _Effect] = {}
        self._lock = threading.Lock()

    def begin(self, key: str, attempt: int, token: str | None = None) -> Claim:
        with self._lock:
            rec = self._effects.get(key)
            if rec is not None and rec.state == "committed":
                return Claim(ClaimOutcome.COMMITTED, result_json=rec.result_json)
            if rec is not None and rec.state == "refused":
                return Claim(ClaimOutcome.REFUSED, error_type=rec.error_type, message=rec.message)
            top = rec.top if rec is not None else 0
            if attempt < top:
                return Claim(ClaimOutcome.STALE)
            if rec is not None and rec.state == "pending" and rec.top == attempt:
                same = rec.owner == token
                return Claim(ClaimOutcome.RUN if same else ClaimOutcome.IN_DOUBT)
            self._effects[key] = _Effect("pending", attempt, token)
            return Claim(ClaimOutcome.RUN)

    def commit(self, key: str, result_json: str) -> None:
        with self._lock:
            rec = self._effects[key]
            rec.state, rec.result_json = "committed", result_json

    def refuse(self, key: str, error_type: str, message: str, raw: str) -> None:
        with self._lock:
            rec = self._effects[key]
            rec.state, rec.error_type, rec.message = "refused", error_type, message

    def release(self, key: str, attempt: int | None = None) -> bool:
        with self._lock:
            rec = self._effects.get(key)
            if rec is None or rec.state != "pending":
                return False
            if attempt is not None and rec.top != attempt:
                return False
            rec.state = "released"
            return True

    def committed(self, key: str) -> str | None:
        """The recorded result of idempotency key ``key``, None when it has none."""
        with self._lock:
            rec = self._effects.get(key)
            return rec.result_json if rec is not None and rec.state == "committed" else None


@dataclass
class MemoryCallStore:
    """``handlers.llm.chat.CallStore`` on dicts: an attempt's model calls, recorded before
    they are reported, so a rerun never asks the (scripted) model again."""

    calls: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    cache: dict[str, dict[str, Any]] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    starts: dict[str, float] = field(default_factory=dict)

    async def get_call(self, attempt_key: str, index: int | str) -> dict[str, Any] | None:
        return self.calls.get((attempt_key, str(index)))

    async def put_call(
        self, attempt_key: str, index: int | str, record: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        where = (attempt_key, str(index))
        fresh = where not in self.calls
        self.calls.setdefault(where, json.loads(json.dumps(record)))
        return self.calls[where], fresh

    async def started_at(self, attempt_key: str, now: float) -> float:
        return self.starts.setdefault(attempt_key, now)

    async def not_before(self, attempt_key: str) -> float:
        return self.waits.get(attempt_key, 0.0)

    async def set_not_before(self, attempt_key: str, when: float) -> None:
        self.waits[attempt_key] = when

    async def cache_get(self, content_hash: str) -> dict[str, Any] | None:
        return self.cache.get(content_hash)

    async def cache_put(self, content_hash: str, entry: dict[str, Any], ttl_s: int) -> None:
        self.cache[content_hash] = entry
