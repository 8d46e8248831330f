"""The runs page's data: one page of runs with their timestamps, and the counts per status.

One function the page calls (:func:`runs_page`), so that the source of the list can change
(the read model's status sets today; run search with name, version, time and attribute
filters when it lands) without the page knowing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.state import STATUSES
from orchestrator.io.redis.read_model import Projection

__all__ = ["PER_PAGE", "RunsPage", "runs_page"]

#: Runs shown per page.
PER_PAGE = 25


@dataclass(frozen=True)
class RunsPage:
    rows: list[dict[str, Any]]
    counts: dict[str, int]
    status: str | None
    #: 1-based.
    page: int
    has_next: bool

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def runs_page(
    projection: Projection, status: str | None, page: int, per_page: int = PER_PAGE
) -> RunsPage:
    """Page ``page`` (1-based) of the runs with ``status`` (None: every run, oldest start
    first; a status: by workflow id), each row with its start and last change times."""
    if status is not None and status not in STATUSES:
        raise InvalidInputError(f"unknown status '{status}'; expected one of {', '.join(STATUSES)}")
    if page < 1:
        raise InvalidInputError(f"page {page} does not exist; pages start at 1")
    first = (page - 1) * per_page
    listed = projection.list(status, limit=first + per_page + 1)
    rows = [projection.get(r["workflow_id"]) for r in listed[first : first + per_page]]
    return RunsPage(
        [r for r in rows if r is not None],
        projection.counts(),
        status,
        page,
        len(listed) > first + per_page,
    )
