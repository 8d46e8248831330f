"""Retry budgets: a token bucket per activity type that paces retry dispatches.

When a downstream is down, every workflow that calls it retries; without a cap the
retries arrive together and keep it down (a retry storm). The orchestrator takes a
token before firing a retry timer; without one, the timer is deferred until a token
is due. Time spent deferred is real (the ``TimerFired`` event records when it fired),
so budgets need no recorded state and recover on their own as tokens refill.

The budget is **global**: ``KEEL_RETRY_BUDGET_PER_S`` and ``KEEL_RETRY_BUDGET_BURST``
are the rate and burst for the whole deployment. Each orchestrator takes the share of
the partitions it owns (``set_share``), so N orchestrators together never allow more
than the stated rate, whatever N is, and the shares follow every rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.model.errors import ConfigError


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RetryBudget:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ConfigError("a retry budget needs rate_per_s > 0 and burst >= 1")
        self.total_rate = rate_per_s
        self.total_burst = float(burst)
        self.rate = rate_per_s
        self.burst = float(burst)
        self.share = 1.0
        self._buckets: dict[str, _Bucket] = {}
        self.deferred = 0

    def set_share(self, owned: int, total: int) -> None:
        """Take ``owned``/``total`` of the global budget (this process's partitions)."""
        share = owned / total if total > 0 else 1.0
        self.share = share
        # A process owning nothing fires no retries; keep the rate positive regardless.
        self.rate = max(self.total_rate * share, 1e-9)
        self.burst = max(1.0, self.total_burst * share)
        for b in self._buckets.values():
            b.tokens = min(b.tokens, self.burst)

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
