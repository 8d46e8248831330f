"""Retry budgets: a token bucket per activity type that paces retry dispatches.

When a downstream is down, every workflow that calls it retries; without a cap the
retries arrive together and keep it down (a retry storm). The orchestrator takes a
token before firing a retry timer; without one, the timer is deferred until a token
is due. Time spent deferred is real (the ``TimerFired`` event records when it fired),
so budgets need no recorded state and recover on their own as tokens refill.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RetryBudget:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a retry budget needs rate_per_s > 0 and burst >= 1")
        self.rate = rate_per_s
        self.burst = float(burst)
        self._buckets: dict[str, _Bucket] = {}
        self.deferred = 0

    def take(self, key: str, now_s: float) -> float:
        """Take a token for ``key``: 0.0 when granted, else seconds until one is due."""
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(self.burst, now_s)
        b.tokens = min(self.burst, b.tokens + (now_s - b.updated) * self.rate)
        b.updated = now_s
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0.0
        self.deferred += 1
        return (1.0 - b.tokens) / self.rate
