"""Finding runs: the read model's runs by name, version, status, time and search attribute.

The contract (``keel workflow list``, ``KeelClient.list_runs`` and the web UI use it):

- :class:`RunFilter` says what to find; every condition given must hold. A bad one (an
  unknown status or search attribute, a time that is not ISO-8601, a range on a keyword, a
  cursor from another listing) raises :class:`InvalidInputError` naming it, when the filter
  is built or, for what needs the app's definitions (attributes), when it is searched.
- Times: ``started_after``/``ended_after`` are inclusive, ``started_before``/
  ``ended_before`` exclusive (``[after, before)``: consecutive windows never overlap); a
  time without a zone is UTC. An ``ended_*`` condition finds ended runs only.
- Order: by the current run's start time, then workflow id; newest first unless
  ``newest_first=False``.
- :func:`search_runs` returns a :class:`RunPage`: at most ``limit`` rows, the total that
  match, and ``next_cursor``, an opaque token for the next page (None on the last page).
  Pass it back with the *same* filter: a cursor remembers its filter and order and is
  refused with another. Walking pages never repeats or skips a run whose start time and
  conditions do not change meanwhile.
- :func:`counts_by_status` counts runs per status, live.

Search attributes are those the app's definitions declare (docs/run-search.md); runs are
indexed by the projector, and runs projected before an upgrade are indexed by
``keel projections rebuild``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, cast

from orchestrator.domain.authoring.definitions import WorkflowDefinition
from orchestrator.domain.authoring.search_attributes import SearchKind, search_value
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.state import STATUSES
from orchestrator.io.redis.run_index import IndexedRun, IndexQuery, Range

if TYPE_CHECKING:  # the filter and the page load no I/O client; a search is given one
    from orchestrator.io.redis.read_model import Projection

__all__ = [
    "MAX_LIMIT",
    "AttrOp",
    "AttributeCondition",
    "RunFilter",
    "RunPage",
    "RunRow",
    "counts_by_status",
    "parse_time",
    "search_runs",
]

#: The most rows one page holds.
MAX_LIMIT = 1000

_CONDITION_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*(>=|<=|=|>|<)(.*)$", re.S)


class AttrOp(StrEnum):
    """How a search attribute is compared: equality (any kind) or order (numbers, times)."""

    EQ = "="
    GE = ">="
    LE = "<="
    GT = ">"
    LT = "<"


def parse_time(value: str | datetime, what: str) -> datetime:
    """An ISO-8601 time (``2026-12-03T10:00:00Z``; no zone means UTC) as an aware datetime."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInputError(
                f"{what}: {value!r} is not an ISO-8601 time (e.g. 2026-12-03T10:00:00Z)"
            ) from None
    if not isinstance(value, datetime):
        raise InvalidInputError(f"{what}: expected a datetime or ISO-8601 text, got {value!r}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _iso(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class AttributeCondition:
    """``name op value``: ``value`` as text (typed by the attribute's declared kind when
    searched) or already a number or a datetime."""

    name: str
    op: AttrOp
    value: str | int | float | datetime

    @classmethod
    def parse(cls, text: str) -> AttributeCondition:
        """``supplier=ACME``, ``amount>=100``, ``due<2026-12-31`` (what ``--attr`` takes)."""
        m = _CONDITION_RE.match(text)
        if m is None:
            raise InvalidInputError(
                f"--attr {text!r}: expected NAME=VALUE, NAME>=VALUE or NAME<=VALUE (also > and <)"
            )
        return cls(m.group(1), AttrOp(m.group(2)), m.group(3))

    def __str__(self) -> str:
        shown = _iso(self.value) if isinstance(self.value, datetime) else self.value
        return f"{self.name}{self.op.value}{shown}"


@dataclass(frozen=True)
class RunFilter:
    """What to find; every condition given must hold (see the module's contract).

    Time fields take an aware (or UTC) datetime or ISO-8601 text; ``attributes`` take
    :class:`AttributeCondition` objects or their text (``"amount>=100"``).
    """

    name: str | None = None
    version: int | None = None
    status: str | None = None
    started_after: datetime | str | None = None
    started_before: datetime | str | None = None
    ended_after: datetime | str | None = None
    ended_before: datetime | str | None = None
    attributes: Sequence[AttributeCondition | str] = ()
    newest_first: bool = True
    limit: int = 50
    cursor: str | None = None

    def __post_init__(self) -> None:
        for name in ("started_after", "started_before", "ended_after", "ended_before"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, parse_time(value, name))
        conditions = tuple(
            AttributeCondition.parse(a) if isinstance(a, str) else a for a in self.attributes
        )
        object.__setattr__(self, "attributes", conditions)
        if self.status is not None and self.status not in STATUSES:
            raise InvalidInputError(
                f"status: unknown status {self.status!r}; expected one of {', '.join(STATUSES)}"
            )
        if self.version is not None and (
            isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1
        ):
            raise InvalidInputError(f"version: expected an int >= 1, got {self.version!r}")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int):
            raise InvalidInputError(f"limit: expected an int, got {self.limit!r}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidInputError(f"limit: expected 1 to {MAX_LIMIT}, got {self.limit}")

    @property
    def conditions(self) -> tuple[AttributeCondition, ...]:
        """``attributes``, each parsed (as the filter holds them once built)."""
        return cast(tuple[AttributeCondition, ...], self.attributes)

    def fingerprint(self) -> str:
        """What a cursor remembers of its listing: the conditions and the order."""
        parts = [
            self.name,
            self.version,
            self.status,
            *(
                _ms(t) if isinstance(t, datetime) else None
                for t in (
                    self.started_after,
                    self.started_before,
                    self.ended_after,
                    self.ended_before,
                )
            ),
            sorted(str(c) for c in self.attributes),
            self.newest_first,
        ]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunRow:
    """One run in a listing. ``ended_at`` is None while it has not ended; ``attributes``
    holds its search attributes (a TIME one as a datetime)."""

    workflow_id: str
    run_id: str
    name: str
    version: int
    status: str
    state: str | None
    started_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    attributes: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON values, times in ISO-8601 UTC (``keel workflow list --json``)."""
        return {
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "name": self.name,
            "version": self.version,
            "status": self.status,
            "state": self.state,
            "started_at": _iso(self.started_at),
            "updated_at": _iso(self.updated_at),
            "ended_at": None if self.ended_at is None else _iso(self.ended_at),
            "attributes": {
                k: _iso(v) if isinstance(v, datetime) else v for k, v in self.attributes.items()
            },
        }


@dataclass(frozen=True)
class RunPage:
    """A page of a listing: its rows, the cursor of the next page (None: the last), and
    how many runs match in all."""

    rows: list[RunRow]
    next_cursor: str | None
    total: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": [r.as_dict() for r in self.rows],
            "next_cursor": self.next_cursor,
            "total": self.total,
        }


def attribute_kinds(
    definitions: Iterable[WorkflowDefinition],
) -> dict[str, dict[SearchKind, list[str]]]:
    """Each declared search attribute's kinds, each with the workflows declaring it so."""
    out: dict[str, dict[SearchKind, list[str]]] = {}
    for d in definitions:
        for name, attribute in d.search_attributes.items():
            out.setdefault(name, {}).setdefault(attribute.kind, []).append(d.label)
    return out


def _kind_of(
    name: str, kinds: Mapping[str, Mapping[SearchKind, list[str]]], c: object
) -> SearchKind:
    """The one kind of attribute ``name`` (a clear error if unknown or declared twice)."""
    found = kinds.get(name)
    if not found:
        declared = ", ".join(sorted(kinds)) or "none"
        raise InvalidInputError(
            f"--attr {c}: unknown search attribute '{name}' (declared: {declared})"
        )
    if len(found) > 1:
        by = "; ".join(f"{k} by {', '.join(labels)}" for k, labels in found.items())
        raise InvalidInputError(
            f"--attr {c}: search attribute '{name}' is declared with different kinds ({by}); "
            "give it one kind in every workflow"
        )
    return next(iter(found))


def _typed(kind: SearchKind, c: AttributeCondition) -> float | str:
    """The condition's value as the index holds it, or a clear error."""
    what = f"search attribute '{c.name}' ({kind})"
    if kind is SearchKind.KEYWORD:
        if c.op is not AttrOp.EQ:
            raise InvalidInputError(f"--attr {c}: {what} is a keyword: only '=' applies")
        if not isinstance(c.value, str):
            raise InvalidInputError(f"--attr {c}: {what} takes text")
        return c.value
    if kind is SearchKind.TIME:
        value = (
            c.value if isinstance(c.value, datetime) else parse_time(str(c.value), f"--attr {c}")
        )
        return float(search_value(kind, value))
    try:
        number = float(c.value) if isinstance(c.value, str) else c.value
        return float(search_value(kind, number))
    except (TypeError, ValueError):
        raise InvalidInputError(f"--attr {c}: {what} takes a number, got {c.value!r}") from None


def _range(op: AttrOp, value: float) -> Range:
    return {
        AttrOp.EQ: Range(value, value),
        AttrOp.GE: Range(lo=value),
        AttrOp.GT: Range(lo=value, lo_open=True),
        AttrOp.LE: Range(hi=value),
        AttrOp.LT: Range(hi=value, hi_open=True),
    }[op]


def _window(after: Any, before: Any) -> Range | None:
    if after is None and before is None:
        return None
    lo = _ms(after) if after is not None else -math.inf
    hi = _ms(before) if before is not None else math.inf
    return Range(lo, hi, hi_open=True)


def _encode_cursor(entry: tuple[float, str], fingerprint: str) -> str:
    score = int(entry[0]) if entry[0].is_integer() else entry[0]
    raw = json.dumps([score, entry[1], fingerprint], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, fingerprint: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, wf, mine = json.loads(raw)
        entry = (float(score), str(wf))
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise InvalidInputError(
            f"cursor: {cursor[:40]!r} is not a cursor a listing printed"
        ) from None
    if mine != fingerprint:
        raise InvalidInputError(
            "cursor: it belongs to a listing with other filters or another order; "
            "use it with the same filters, or start again without a cursor"
        )
    return entry


def search_runs(
    projection: Projection,
    definitions: Mapping[tuple[str, int], WorkflowDefinition],
    run_filter: RunFilter,
) -> RunPage:
    """The page of runs ``run_filter`` finds in ``projection``'s read model; search
    attributes are typed by ``definitions`` (the app's). See the module's contract."""
    kinds = attribute_kinds(definitions.values())
    ranges: list[tuple[SearchKind, str, Range]] = []
    keywords: list[tuple[str, str]] = []
    for c in run_filter.conditions:
        kind = _kind_of(c.name, kinds, c)
        value = _typed(kind, c)
        if isinstance(value, str):
            keywords.append((c.name, value))
        else:
            ranges.append((kind, c.name, _range(c.op, value)))
    fingerprint = run_filter.fingerprint()
    after = None if run_filter.cursor is None else _decode_cursor(run_filter.cursor, fingerprint)
    query = IndexQuery(
        name=run_filter.name,
        version=run_filter.version,
        status=run_filter.status,
        started=_window(run_filter.started_after, run_filter.started_before),
        ended=_window(run_filter.ended_after, run_filter.ended_before),
        ranges=tuple(ranges),
        keywords=tuple(keywords),
        newest_first=run_filter.newest_first,
        after=after,
        limit=run_filter.limit,
    )
    found, total, last = projection.find_runs(query)
    cursor = None if last is None else _encode_cursor(last, fingerprint)
    return RunPage([_row(r, kinds) for r in found], cursor, total)


def _row(run: IndexedRun, kinds: Mapping[str, Mapping[SearchKind, list[str]]]) -> RunRow:
    attributes: dict[str, Any] = {}
    for name, value in run.attributes.items():
        is_time = set(kinds.get(name, ())) == {SearchKind.TIME}
        attributes[name] = _time(int(value)) if is_time else value
    return RunRow(
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        name=run.name,
        version=run.version,
        status=run.status,
        state=run.state,
        started_at=_time(run.started_at),
        updated_at=_time(run.updated_at),
        ended_at=None if run.ended_at is None else _time(run.ended_at),
        attributes=attributes,
    )


def counts_by_status(projection: Projection) -> dict[str, int]:
    """How many runs are in each status now (every status, zeros included), keyed by the
    status's plain name (it prints ``{'running': 3, ...}``, not the enum's members)."""
    return {str(status): n for status, n in projection.counts().items()}
