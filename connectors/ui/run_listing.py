"""The runs page's data: the filters of its form, one page of runs (run search:
orchestrator/client/run_search.py), and the counts per status.

The form's fields are the query string of the page's URL, so a filtered listing is a link
one can share; a page's "next" link carries run search's cursor (which is refused with
another filter) and the page number only for display.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from orchestrator.client.client import KeelClient
from orchestrator.client.run_search import RunFilter, RunPage
from orchestrator.domain.model.errors import InvalidInputError

__all__ = ["ATTRIBUTE_FIELDS", "PER_PAGE", "RunQuery", "RunsPage", "runs_page"]

#: Runs shown per page.
PER_PAGE = 25
#: How many search attribute conditions the form offers.
ATTRIBUTE_FIELDS = 2
#: The time fields of the form (run search's names).
TIME_FIELDS = ("started_after", "started_before", "ended_after", "ended_before")


@dataclass(frozen=True)
class RunQuery:
    """What the runs page was asked for, as the form's text (``""``: not given)."""

    name: str = ""
    version: str = ""
    status: str = ""
    times: dict[str, str] = field(default_factory=dict)
    attributes: tuple[str, ...] = ()
    oldest_first: bool = False
    cursor: str = ""
    page: int = 1

    @classmethod
    def of(cls, query: Mapping[str, str], attributes: list[str]) -> RunQuery:
        """The query of a request (``attributes``: every ``attr`` value given)."""
        try:
            page = max(1, int(query.get("page", "1")))
        except ValueError:
            page = 1
        return cls(
            name=query.get("name", "").strip(),
            version=query.get("version", "").strip(),
            status=query.get("status", "").strip(),
            times={t: query.get(t, "").strip() for t in TIME_FIELDS if query.get(t, "").strip()},
            attributes=tuple(a.strip() for a in attributes if a.strip()),
            oldest_first=query.get("order") == "oldest",
            cursor=query.get("cursor", ""),
            page=page,
        )

    def run_filter(self, limit: int) -> RunFilter:
        """Run search's filter (:class:`InvalidInputError` names a bad field)."""
        version = None
        if self.version:
            try:
                version = int(self.version)
            except ValueError:
                raise InvalidInputError(
                    f"version: expected a number, got {self.version!r}"
                ) from None
        return RunFilter(
            name=self.name or None,
            version=version,
            status=self.status or None,
            attributes=self.attributes,
            newest_first=not self.oldest_first,
            limit=limit,
            cursor=self.cursor or None,
            started_after=self.times.get("started_after"),
            started_before=self.times.get("started_before"),
            ended_after=self.times.get("ended_after"),
            ended_before=self.times.get("ended_before"),
        )

    def link(self, **changes: Any) -> str:
        """The query string of this listing, changed by ``changes`` (a new filter starts
        at page 1: no cursor)."""
        q = replace(self, **changes) if changes else self
        pairs: list[tuple[str, str]] = [
            (k, v) for k, v in (("name", q.name), ("version", q.version), ("status", q.status)) if v
        ]
        pairs += list(q.times.items())
        pairs += [("attr", a) for a in q.attributes]
        if q.oldest_first:
            pairs.append(("order", "oldest"))
        if q.cursor:
            pairs += [("cursor", q.cursor), ("page", str(q.page))]
        return urlencode(pairs)


@dataclass(frozen=True)
class RunsPage:
    query: RunQuery
    found: RunPage
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Every run, whatever its status."""
        return sum(self.counts.values())


def runs_page(client: KeelClient, query: RunQuery, per_page: int = PER_PAGE) -> RunsPage:
    """The runs ``query`` finds, a page of ``per_page``, with the live counts per status."""
    found = client.list_runs(query.run_filter(per_page))
    return RunsPage(query, found, client.counts_by_status())
