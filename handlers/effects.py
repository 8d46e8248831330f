"""The effect store: one Redis record per side effect, keyed by the idempotency key.

A handler that writes to the outside world is marked ``@side_effect``. Before it runs,
the worker claims the key (``pending``, with the physical attempt); after it returns,
it records the result (``committed``). So:

* a task redelivered after the effect committed returns the recorded result and never
  calls out again;
* a task redelivered while its own attempt is still ``pending`` (the worker died
  mid-call) does not call out blindly either: its outcome is *unknown*, and the
  orchestrator runs the activity's status query before anything is repeated;
* a retry the orchestrator decided on (a higher attempt) may claim the key again, and
  from then on an older attempt still queued somewhere is *stale* and never runs.

Losing Redis costs at most a status query, never a duplicate effect: the external
system also deduplicates by the same key. Records outlive the retry horizon (TTL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TTL_S = 14 * 24 * 3600

# Atomically: committed -> return it; an attempt older than one already claimed is
# stale (the orchestrator moved past it); pending by this very attempt -> in doubt;
# otherwise claim for this attempt.
_BEGIN = """
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'committed' then
  return {'committed', redis.call('HGET', KEYS[1], 'result')}
end
local attempt = tonumber(ARGV[1])
local top = tonumber(redis.call('HGET', KEYS[1], 'top') or '0')
if attempt < top then
  return {'stale', tostring(top)}
end
if state == 'pending' and top == attempt then
  return {'in_doubt', tostring(top)}
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempt', ARGV[1], 'top', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return {'run', ''}
"""


def side_effect(fn: F) -> F:
    """Mark an activity handler as writing to an external system (see module doc)."""
    fn.__keel_side_effect__ = True  # type: ignore[attr-defined]
    return fn


def has_side_effect(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__keel_side_effect__", False))


@dataclass(frozen=True)
class Claim:
    """``run``: go ahead; ``committed``: ``result_json`` is the recorded result;
    ``in_doubt``: an earlier dispatch of this attempt started and never finished;
    ``stale``: a later attempt was already claimed, so this one must not run."""

    outcome: str
    result_json: str | None = None


class EffectStore:
    def __init__(self, client: redis.Redis, prefix: str, ttl_s: int = DEFAULT_TTL_S) -> None:
        self.r = client
        self.prefix = f"keel:{prefix}:effect:"
        self.ttl_s = ttl_s
        self._begin = client.register_script(_BEGIN)

    @classmethod
    def from_url(cls, url: str, prefix: str) -> EffectStore:
        return cls(redis.Redis.from_url(url, decode_responses=True), prefix)

    def begin(self, key: str, attempt: int) -> Claim:
        outcome, value = self._begin(keys=[self.prefix + key], args=[attempt, self.ttl_s])
        return Claim(outcome, value if outcome == "committed" else None)

    def commit(self, key: str, result_json: str) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self.prefix + key, mapping={"state": "committed", "result": result_json})
        pipe.expire(self.prefix + key, self.ttl_s)
        pipe.execute()

    def release(self, key: str) -> None:
        """The call failed without an effect (a definite failure): a retry may run.

        The highest attempt claimed is kept, so an older attempt stays fenced off.
        """
        self.r.hset(self.prefix + key, "state", "released")

    def get(self, key: str) -> dict[str, str]:
        return self.r.hgetall(self.prefix + key)
