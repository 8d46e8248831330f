"""Policies a step declares: how it retries and how its effect is undone.

:class:`RetryPolicy` bounds the retries of transient failures (docs/activities.md);
:class:`Compensation` names the activity that undoes a step's effect (docs/sagas.md).
Both are re-exported by :mod:`orchestrator.domain.authoring.definitions`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.authoring.activity_refs import ActivityFunction, activity_type_of
from orchestrator.domain.authoring.waits import Duration, duration_ms
from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.fingerprint import callable_fingerprint
from orchestrator.domain.model.limits import MAX_DURATION_MS

__all__ = ["DEFAULT_RETRY", "Compensation", "RetryPolicy"]

_MAX_DAYS = MAX_DURATION_MS // (24 * 3600 * 1000)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries of transient failures: exponential backoff capped, with full jitter.

    ``max_elapsed`` (seconds or a ``timedelta``; None: unbounded) bounds the time from
    the first dispatch of a logical attempt: no retry is scheduled whose timer would fire
    later than that. ``non_retryable`` names ``error_type`` s that are never retried, even
    when a worker reports them transient (they are treated as permanent).
    """

    max_attempts: int = 3
    initial_interval_ms: int = 1000
    backoff_coefficient: float = 2.0
    max_interval_ms: int = 60000
    max_elapsed: Duration | None = None
    non_retryable: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise DefinitionError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_interval_ms < 0 or self.max_interval_ms < 0:
            raise DefinitionError("RetryPolicy intervals must be >= 0 ms")
        if max(self.initial_interval_ms, self.max_interval_ms) > MAX_DURATION_MS:
            raise DefinitionError(
                f"RetryPolicy intervals must be at most {MAX_DURATION_MS:,} ms ({_MAX_DAYS:,} days)"
            )
        if self.backoff_coefficient < 1.0:
            raise DefinitionError(
                f"RetryPolicy.backoff_coefficient must be >= 1.0, got {self.backoff_coefficient}"
            )
        if self.max_elapsed is not None:
            try:
                duration_ms(self.max_elapsed)
            except (TypeError, ValueError) as exc:
                raise DefinitionError(f"RetryPolicy.max_elapsed: {exc}") from None
        names = self.non_retryable
        if isinstance(names, str):
            names = (names,)
        names = frozenset(names)
        if not all(isinstance(n, str) and n for n in names):
            raise DefinitionError("RetryPolicy.non_retryable must hold error_type names")
        object.__setattr__(self, "non_retryable", names)

    @property
    def max_elapsed_ms(self) -> int | None:
        return None if self.max_elapsed is None else duration_ms(self.max_elapsed)

    def backoff_cap_ms(self, attempt: int) -> int:
        """Upper bound of the delay after failed attempt ``attempt`` (1-based).

        Never above ``max_interval_ms`` (itself bounded), however many attempts a
        redrive adds: a power that overflows a float is simply past the cap.
        """
        try:
            raw = self.initial_interval_ms * self.backoff_coefficient ** max(0, attempt - 1)
        except OverflowError:
            raw = math.inf
        return int(min(float(self.max_interval_ms), raw))

    def describe(self) -> list[Any]:
        """The digest's view (the two newer fields only when set, so old digests hold)."""
        out: list[Any] = [
            self.max_attempts,
            self.initial_interval_ms,
            self.backoff_coefficient,
            self.max_interval_ms,
        ]
        if self.max_elapsed is not None or self.non_retryable:
            out.append(
                {"max_elapsed_ms": self.max_elapsed_ms, "non_retryable": sorted(self.non_retryable)}
            )
        return out


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True)
class Compensation:
    """The activity that undoes a step's effect (docs/sagas.md).

    ``input`` maps the step's recorded result (decoded JSON) to the compensation's
    input (default: the result itself); it must be pure, like every definition
    function. The compensation is an activity of its own: its own idempotency key, its
    ``retry`` policy, its ``status_query`` and ``start_to_close`` timeout. Past its
    retries it is given up: the other compensations still run and the run ends
    ``compensation_failed`` with a human task naming what is left to undo.
    ``activity`` and ``status_query`` name activity types, or are their registered handler
    functions (the compensation holds the names: the same digest either way).
    """

    activity: str | ActivityFunction
    input: Callable[[Any], Any] | None = None
    retry: RetryPolicy | None = None
    status_query: str | ActivityFunction | None = None
    start_to_close: Duration | None = None

    def __post_init__(self) -> None:
        if callable(self.activity):
            named = activity_type_of(self.activity, "compensation")
            object.__setattr__(self, "activity", named)
        if callable(self.status_query):
            named = activity_type_of(self.status_query, "compensation: status_query")
            object.__setattr__(self, "status_query", named)

    @property
    def activity_type(self) -> str:
        """The compensating activity type's name (a function given is resolved when built)."""
        return self.activity if isinstance(self.activity, str) else ""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "activity": self.activity_type,
            "input": callable_fingerprint(self.input),
            "retry": None if self.retry is None else self.retry.describe(),
        }
        if self.status_query is not None:
            out["status_query"] = self.status_query
        if self.start_to_close is not None:
            out["start_to_close"] = duration_ms(self.start_to_close)
        return out
