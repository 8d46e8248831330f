"""Per-type limits an activity declares: concurrent executions and a rate, for all workers.

``@app.activity("llm_call", max_concurrent=4, rate_limit=RateLimit(20, per=60))`` (or
``rate_limit="20/min"``). The workers enforce them together through Redis
(``handlers/type_limits.py``); a task over a limit is reported ``throttled`` and
dispatched again later without spending a retry (docs/limits.md, "Per-type limits").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.domain.model import errors as kinds

__all__ = ["MAX_CONCURRENT", "MAX_RATE_COUNT", "MAX_RATE_PER_S", "ActivityLimits", "RateLimit"]

#: The largest ``max_concurrent`` accepted (a worker runs at most 500 tasks at once).
MAX_CONCURRENT = 100_000
#: The most calls one rate limit may allow per window.
MAX_RATE_COUNT = 1_000_000
#: The longest window of a rate limit: one day.
MAX_RATE_PER_S = 86_400
#: ``COUNT/UNIT``: the units a rate limit's text may name, in seconds.
_UNITS = {"s": 1, "sec": 1, "min": 60, "h": 3600, "hour": 3600, "day": 86_400}
_TEXT = re.compile(r"(\d{1,7})/(s|sec|min|h|hour|day)")


class LimitDeclarationError(kinds.DefinitionError):
    """A per-type limit is not a limit Keel can enforce (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` starts of the activity type in any window of ``per`` seconds."""

    count: int
    per: int = 60

    def __post_init__(self) -> None:
        for name, value, top in (
            ("count", self.count, MAX_RATE_COUNT),
            ("per", self.per, MAX_RATE_PER_S),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise LimitDeclarationError(
                    f"RateLimit {name} must be a whole number from 1 to {top:,}; got {value!r}"
                )

    @property
    def per_ms(self) -> int:
        return self.per * 1000

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """``"10/min"``, ``"5/s"``, ``"100/h"``, ``"1000/day"``: nothing else."""
        match = _TEXT.fullmatch(text.strip())
        if match is None:
            raise LimitDeclarationError(
                f"rate limit {text[:50]!r} is not COUNT/UNIT with UNIT one of "
                "s, sec, min, h, hour, day (e.g. '10/min')"
            )
        return cls(int(match.group(1)), _UNITS[match.group(2)])

    def __str__(self) -> str:
        for unit, seconds in (("day", 86_400), ("h", 3600), ("min", 60), ("s", 1)):
            if self.per == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.per}s"


@dataclass(frozen=True, slots=True)
class ActivityLimits:
    """What one activity type may use across every worker; None: unlimited."""

    max_concurrent: int | None = None
    rate: RateLimit | None = None

    @classmethod
    def declare(
        cls, activity_type: str, max_concurrent: object, rate_limit: object
    ) -> ActivityLimits | None:
        """The limits ``@app.activity`` was given, checked; None when it gave none."""
        if max_concurrent is None and rate_limit is None:
            return None
        what = f"activity '{activity_type}'"
        if max_concurrent is not None and (
            isinstance(max_concurrent, bool)
            or not isinstance(max_concurrent, int)
            or not 1 <= max_concurrent <= MAX_CONCURRENT
        ):
            raise LimitDeclarationError(
                f"{what}: max_concurrent must be a whole number from 1 to "
                f"{MAX_CONCURRENT:,}; got {max_concurrent!r}"
            )
        rate: RateLimit | None
        try:
            if rate_limit is None or isinstance(rate_limit, RateLimit):
                rate = rate_limit
            elif isinstance(rate_limit, str):
                rate = RateLimit.parse(rate_limit)
            else:
                raise LimitDeclarationError(
                    f"rate_limit must be a RateLimit or a text like '10/min'; got "
                    f"{type(rate_limit).__name__}"
                )
        except LimitDeclarationError as exc:
            raise LimitDeclarationError(f"{what}: {exc}") from None
        return cls(max_concurrent, rate)

    def __str__(self) -> str:
        parts = []
        if self.max_concurrent is not None:
            parts.append(f"max_concurrent={self.max_concurrent}")
        if self.rate is not None:
            parts.append(f"rate_limit={self.rate}")
        return ", ".join(parts)
