"""Unknown outcomes and how they were settled, folded over a run's events: the one count
``keel demo``, ``keel evaluate``, the invoice demo and the metrics share, so their
numbers agree (docs/activities.md, "Side effects and unknown outcomes").

An attempt's outcome is *unknown* when the engine could not tell whether its write
happened and had to find out: the attempt failed as ``unknown``, or it timed out after it
could have started and the engine sent the step's status query. A timeout the engine
retries under the same key (the step has no status query) is a retry, not an unknown
outcome. An unknown outcome is *settled* when its status query answers ``found`` true or
false, or when an operator resolves it (``keel workflow resolve``); a query that answers
neither leaves it open (the run needs attention). Each attempt counts once, even when a
late report of an attempt that already timed out was recorded (older histories hold some).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.domain.lifecycle.activities import QUERY_SEP
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityResolved,
    ActivityScheduled,
    ActivityTimedOut,
)
from orchestrator.domain.model.vocabulary import FailureClass, Resolution

__all__ = [
    "OutcomeFold",
    "Settled",
    "SettledBy",
    "Unknown",
    "found_in",
    "outcomes_of",
    "query_parent",
]


class SettledBy(StrEnum):
    """Who settled an unknown outcome (the ``by`` label of the metrics)."""

    QUERY = "query"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Unknown:
    """An attempt whose outcome became unknown."""

    activity_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Settled:
    """An unknown outcome of ``activity_id`` settled: ``resolution`` is a
    :class:`Resolution` value (a query answers ``found`` or ``not_found`` only)."""

    activity_id: str
    by: SettledBy
    resolution: str


def query_parent(activity_id: str) -> str | None:
    """The activity a status query asks about (its id is ``<parent>/query/<attempt>``);
    None when ``activity_id`` is not a status query."""
    parent, sep, _ = activity_id.rpartition(QUERY_SEP)
    return parent if sep else None


def found_in(answer: object) -> bool | None:
    """A status query's parsed answer: whether the write was found; None when the answer
    is not ``{"found": true|false, ...}`` (it settles nothing)."""
    found = answer.get("found") if isinstance(answer, dict) else None
    return found if isinstance(found, bool) else None


def _never(activity_id: str, attempt: int) -> bool:
    return False


class OutcomeFold:
    """The count over one run's events, fed in order; each step returns what it counted.

    Typed events go through :meth:`add`; the projector's metrics, which read history
    lines, call the per-event methods with the fields. ``timed_out_before`` answers for
    attempts that timed out in events not fed here (a fold that starts mid-history, like
    the metrics of one projector batch).
    """

    def __init__(self, timed_out_before: Callable[[str, int], bool] = _never) -> None:
        self.unknown = 0
        self.settled: Counter[SettledBy] = Counter()
        self._timed_out: set[tuple[str, int]] = set()
        self._counted: set[tuple[str, int]] = set()
        self._timed_out_before = timed_out_before

    @property
    def settled_total(self) -> int:
        return sum(self.settled.values())

    def add(self, payload: Any) -> Unknown | Settled | None:
        """Fold one event's payload (anything else is ignored)."""
        p = payload
        if isinstance(p, ActivityFailed):
            return self.failed(p.activity_id, p.attempt, p.failure_class)
        if isinstance(p, ActivityTimedOut):
            self.timed_out(p.activity_id, p.attempt)
        elif isinstance(p, ActivityScheduled):
            return self.scheduled(p.activity_id, p.attempt)
        elif isinstance(p, ActivityCompleted) and query_parent(p.activity_id) is not None:
            try:
                answer = json.loads(p.result_json)
            except ValueError:
                return None
            return self.answered(p.activity_id, found_in(answer))
        elif isinstance(p, ActivityResolved):
            return self.resolved(p.activity_id, p.resolution)
        return None

    def failed(self, activity_id: str, attempt: int, failure_class: str) -> Unknown | None:
        if failure_class != FailureClass.UNKNOWN:
            return None
        return self._count(activity_id, attempt)

    def timed_out(self, activity_id: str, attempt: int) -> None:
        """Unknown only if a status query follows (see :meth:`scheduled`)."""
        self._timed_out.add((activity_id, attempt))

    def scheduled(self, activity_id: str, attempt: int) -> Unknown | None:
        """A status query's first dispatch after a timeout makes that timeout unknown."""
        parent = query_parent(activity_id)
        if parent is None or attempt != 1:
            return None
        of = activity_id.rpartition(QUERY_SEP)[2]
        if not of.isdigit():
            return None
        asked = (parent, int(of))
        if asked in self._timed_out or self._timed_out_before(*asked):
            return self._count(*asked)
        return None

    def answered(self, query_id: str, found: bool | None) -> Settled | None:
        """A status query answered (``found`` from :func:`found_in`)."""
        parent = query_parent(query_id)
        if parent is None or found is None:
            return None
        self.settled[SettledBy.QUERY] += 1
        resolution = Resolution.FOUND if found else Resolution.NOT_FOUND
        return Settled(parent, SettledBy.QUERY, resolution.value)

    def resolved(self, activity_id: str, resolution: str) -> Settled:
        self.settled[SettledBy.OPERATOR] += 1
        return Settled(activity_id, SettledBy.OPERATOR, resolution)

    def _count(self, activity_id: str, attempt: int) -> Unknown | None:
        if (activity_id, attempt) in self._counted:
            return None  # the late report of an attempt already counted
        self._counted.add((activity_id, attempt))
        self.unknown += 1
        return Unknown(activity_id, attempt)


def outcomes_of(envelopes: Iterable[Any]) -> OutcomeFold:
    """The fold over one run's envelopes in log order (commands among them are ignored)."""
    fold = OutcomeFold()
    for env in envelopes:
        fold.add(env.payload)
    return fold
