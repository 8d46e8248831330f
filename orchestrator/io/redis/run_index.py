"""The read model's index of runs: found by name, version, status, time and search attribute.

Every key is in the read-model space (``keel:<prefix>:rm:ix:...``), so ``keel projections
rebuild`` clears it and the fold rebuilds it. Each index is a sorted set whose member is
the workflow id, written in the projector's transaction with the row:

==================================  ===========================================
key                                  score
==================================  ===========================================
``rm:workflows`` (the row index)     the current run's start (epoch ms)
``rm:ix:status:<status>``            the start; a status change moves the run
``rm:ix:name:<workflow>``            the start
``rm:ix:version``                    the definition version the run is on
``rm:ix:ended``                      the end (terminal runs only)
``rm:ix:num:<attribute>``            the number (NUMBER attributes)
``rm:ix:time:<attribute>``           epoch ms (TIME attributes)
``rm:ix:kw:<attribute>``             a 52-bit hash of the text (KEYWORD attributes;
                                     matches are checked against the row's text)
==================================  ===========================================

One member per run in each set, so a write is a ``ZADD`` that replaces the run's entry
(a changed attribute, a migrated version) and needs no read of what was there before:
replaying a batch writes the same scores again. The row keeps ``ended_at`` and
``search_json`` (the attribute values) beside the fields it already had.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.authoring.definitions import WorkflowDefinition
from orchestrator.domain.authoring.search_attributes import (
    SearchKind,
    SearchValue,
    compute_search_attributes,
)
from orchestrator.domain.model.messages import TERMINAL_EVENT_NAMES, Envelope
from orchestrator.domain.model.state import TERMINAL_STATUSES, WorkflowState
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.records import fast_json

__all__ = [
    "Found",
    "IndexQuery",
    "IndexedRun",
    "Position",
    "Range",
    "RunIndex",
    "keyword_score",
]

#: Where a run sits in a listing: its start time (epoch ms) and workflow id.
Position = tuple[float, str]

#: Members read per round trip when walking one index in order.
_CHUNK = 500

#: The row fields a listing shows.
_ROW_FIELDS = (
    "run_id",
    "name",
    "version",
    "status",
    "state",
    "started_at",
    "updated_at",
    "ended_at",
    "search_json",
)

_KIND_SPACE = {SearchKind.KEYWORD: "kw", SearchKind.NUMBER: "num", SearchKind.TIME: "time"}


def keyword_score(text: str) -> int:
    """A keyword's score: 52 bits of its BLAKE2b hash (exact as a Redis double)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest()) >> 12


@dataclass(frozen=True)
class Range:
    """Scores from ``lo`` to ``hi``; an ``*_open`` end excludes its bound."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False

    def bounds(self) -> tuple[str, str]:
        """The ``ZRANGEBYSCORE`` min and max arguments."""
        return _bound(self.lo, self.lo_open), _bound(self.hi, self.hi_open)

    def holds(self, score: float) -> bool:
        above = score > self.lo if self.lo_open else score >= self.lo
        below = score < self.hi if self.hi_open else score <= self.hi
        return above and below


def _bound(value: float, open_: bool) -> str:
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"({value!r}" if open_ else repr(value)


#: One condition: an index, the scores it must hold, a keyword's (name, text) to check.
_Filter = tuple[str, Range, tuple[str, str] | None]


@dataclass(frozen=True)
class IndexQuery:
    """What :meth:`RunIndex.find` looks for: every field given must hold (AND).

    ``after`` is the position (start time, workflow id) a page continues after, in
    ``newest_first`` order.
    """

    name: str | None = None
    version: int | None = None
    status: str | None = None
    started: Range | None = None
    ended: Range | None = None
    ranges: tuple[tuple[SearchKind, str, Range], ...] = ()
    keywords: tuple[tuple[str, str], ...] = ()
    newest_first: bool = True
    after: Position | None = None
    limit: int = 50


@dataclass(frozen=True)
class IndexedRun:
    """One run as a listing shows it (times in epoch ms; ``ended_at`` None while it runs)."""

    workflow_id: str
    run_id: str
    name: str
    version: int
    status: str
    state: str | None
    started_at: int
    updated_at: int
    ended_at: int | None
    attributes: dict[str, SearchValue] = field(default_factory=dict)


#: A page of runs, how many match in all, and where the next page continues (None: none).
Found = tuple[list[IndexedRun], int, Position | None]


class RunIndex:
    """Writes (in the projector's transaction) and reads the index of one topic prefix.

    ``definitions`` give the search attributes (the projector's app); a reader needs none.
    """

    def __init__(
        self,
        keyspace: Keyspace,
        definitions: Mapping[tuple[str, int], WorkflowDefinition] | None = None,
    ) -> None:
        self.ks = keyspace
        self.definitions = definitions if definitions is not None else {}
        self.prefix = f"{keyspace.read_model}ix:"

    # -- keys -------------------------------------------------------------------------
    def status_key(self, status: str) -> str:
        return f"{self.prefix}status:{status}"

    def name_key(self, name: str) -> str:
        return f"{self.prefix}name:{name}"

    @property
    def version_key(self) -> str:
        return f"{self.prefix}version"

    @property
    def ended_key(self) -> str:
        return f"{self.prefix}ended"

    def attribute_key(self, kind: SearchKind, name: str) -> str:
        return f"{self.prefix}{_KIND_SPACE[kind]}:{name}"

    # -- writes -----------------------------------------------------------------------
    def queue(
        self,
        pipe: Any,
        wf: str,
        state: WorkflowState,
        events: Sequence[Envelope[Any] | str],
        old_status: str | None,
        restarted: bool,
    ) -> dict[str, Any]:
        """Queue the index writes of one row's update; returns the row fields to add.

        ``restarted``: the row is new or its current run began in these events (its
        start time is new).
        """
        row: dict[str, Any] = {}
        if restarted:
            pipe.zadd(self.name_key(state.name), {wf: state.started_at})
        if restarted or old_status != state.status:
            if old_status and old_status != state.status:
                pipe.zrem(self.status_key(old_status), wf)
            pipe.zadd(self.status_key(state.status), {wf: state.started_at})
            if state.status in TERMINAL_STATUSES:
                ended = _ended_at(events, state.updated_at)
                row["ended_at"] = ended
                pipe.zadd(self.ended_key, {wf: ended})
            else:
                row["ended_at"] = ""
                pipe.zrem(self.ended_key, wf)
        pipe.zadd(self.version_key, {wf: state.version})
        definition = self.definitions.get((state.name, state.version))
        if definition is not None and definition.search_attributes:
            values, problems = compute_search_attributes(definition, state)
            for name, attribute in definition.search_attributes.items():
                key = self.attribute_key(attribute.kind, name)
                value = values.get(name)
                if value is None:
                    pipe.zrem(key, wf)
                elif isinstance(value, str):
                    pipe.zadd(key, {wf: keyword_score(value)})
                else:
                    pipe.zadd(key, {wf: value})
            row["search_json"] = fast_json.dumps_sorted(values)
            row["search_problems"] = "; ".join(f"{k}: {v}" for k, v in problems.items())
        return row

    # -- reads ------------------------------------------------------------------------
    def find(self, r: Any, query: IndexQuery) -> tuple[list[IndexedRun], int, Position | None]:
        """The page of runs ``query`` matches, how many match in all, and the position the
        next page continues after (None: this is the last); in start-time order (then
        workflow id), newest first or oldest."""
        primary, started = self._primary(query)
        filters = self._filters(query)
        if not filters:
            lo, hi = started.bounds()
            total = int(r.zcount(primary, lo, hi))
            page = list(_take(self._walk(r, primary, started, query), query.limit + 1))
        else:
            members: set[str] | None = None
            for key, rng, check in sorted(filters, key=lambda f: r.zcount(f[0], *f[1].bounds())):
                found = self._members(r, key, rng, check, members)
                members = found if members is None else members & found
                if not members:
                    break
            ordered = self._ordered(r, primary, started, members or set(), query)
            total = len(ordered)
            page = _after(ordered, query)[: query.limit + 1]
        last = page[query.limit - 1] if len(page) > query.limit else None
        return self._rows(r, page[: query.limit]), total, last

    def _primary(self, query: IndexQuery) -> tuple[str, Range]:
        """The index walked in start order: the status's, else the name's, else all runs."""
        if query.status is not None:
            key = self.status_key(query.status)
        elif query.name is not None:
            key = self.name_key(query.name)
        else:
            key = self.ks.workflows
        return key, query.started or Range()

    def _filters(self, query: IndexQuery) -> list[_Filter]:
        """The other conditions, each an index and the scores it must hold (and for a
        keyword its name and text, checked against the row: a hash may collide)."""
        out: list[_Filter] = []
        if query.status is not None and query.name is not None:
            out.append((self.name_key(query.name), Range(), None))
        if query.version is not None:
            out.append((self.version_key, Range(query.version, query.version), None))
        if query.ended is not None:
            out.append((self.ended_key, query.ended, None))
        for kind, name, rng in query.ranges:
            out.append((self.attribute_key(kind, name), rng, None))
        for name, text in query.keywords:
            score = keyword_score(text)
            key = self.attribute_key(SearchKind.KEYWORD, name)
            out.append((key, Range(score, score), (name, text)))
        return out

    def _members(
        self,
        r: Any,
        key: str,
        rng: Range,
        keyword: tuple[str, str] | None,
        within: set[str] | None,
    ) -> set[str]:
        """The members of ``key`` within ``rng`` (a keyword's checked against the rows)."""
        found = {str(m) for m in r.zrangebyscore(key, *rng.bounds())}
        if within is not None:
            found &= within
        if keyword is None or not found:
            return found
        ids = sorted(found)
        pipe = r.pipeline(transaction=False)
        for wf in ids:
            pipe.hget(self.ks.workflow(wf), "search_json")
        name, text = keyword
        return {
            wf
            for wf, js in zip(ids, pipe.execute(), strict=True)
            if js and json.loads(js).get(name) == text
        }

    def _ordered(
        self, r: Any, primary: str, started: Range, members: set[str], query: IndexQuery
    ) -> list[Position]:
        """``members`` in ``primary`` within ``started``, as (start, id) in listing order."""
        ids = sorted(members)
        scores = r.zmscore(primary, ids) if ids else []
        found = [(float(s), wf) for wf, s in zip(ids, scores, strict=True) if s is not None]
        found = [(s, wf) for s, wf in found if started.holds(s)]
        return sorted(found, reverse=query.newest_first)

    def _walk(self, r: Any, key: str, started: Range, query: IndexQuery) -> Iterator[Position]:
        """``key``'s members within ``started``, in listing order, after ``query.after``."""
        rng = started
        if query.after is not None:  # start at the cursor's score; ties are skipped below
            score = query.after[0]
            if query.newest_first and score < rng.hi:
                rng = Range(rng.lo, score, rng.lo_open, False)
            elif not query.newest_first and score > rng.lo:
                rng = Range(score, rng.hi, False, rng.hi_open)
        lo, hi = rng.bounds()
        offset = 0
        while True:
            if query.newest_first:
                chunk = r.zrevrangebyscore(key, hi, lo, start=offset, num=_CHUNK, withscores=True)
            else:
                chunk = r.zrangebyscore(key, lo, hi, start=offset, num=_CHUNK, withscores=True)
            yield from _after([(float(s), str(m)) for m, s in chunk], query)
            if len(chunk) < _CHUNK:
                return
            offset += _CHUNK

    def _rows(self, r: Any, page: list[Position]) -> list[IndexedRun]:
        pipe = r.pipeline(transaction=False)
        for _, wf in page:
            pipe.hmget(self.ks.workflow(wf), _ROW_FIELDS)
        out = []
        for (_, wf), values in zip(page, pipe.execute(), strict=True):
            h = dict(zip(_ROW_FIELDS, values, strict=True))
            if h["run_id"] is None:
                continue  # the row went (a rebuild's clear) between the two reads
            out.append(
                IndexedRun(
                    workflow_id=wf,
                    run_id=h["run_id"],
                    name=h["name"],
                    version=int(h["version"]),
                    status=h["status"],
                    state=h["state"] or None,
                    started_at=int(h["started_at"]),
                    updated_at=int(h["updated_at"]),
                    ended_at=int(h["ended_at"]) if h["ended_at"] else None,
                    attributes=json.loads(h["search_json"]) if h["search_json"] else {},
                )
            )
        return out


def _after(ordered: Iterable[Position], query: IndexQuery) -> list[Position]:
    """The entries of ``ordered`` past the cursor ``query.after`` (all without one)."""
    if query.after is None:
        return list(ordered)
    if query.newest_first:
        return [e for e in ordered if e < query.after]
    return [e for e in ordered if e > query.after]


def _take(entries: Iterator[Position], n: int) -> Iterator[Position]:
    for i, entry in enumerate(entries):
        if i >= n:
            return
        yield entry


def _ended_at(events: Sequence[Envelope[Any] | str], fallback: int) -> int:
    """When the run ended: the recorded time of the terminal event among ``events``."""
    for e in reversed(events):
        if isinstance(e, str):
            try:
                line = json.loads(e)
            except ValueError:
                continue  # not an event's history line: no end in it
            if isinstance(line, dict) and line.get("type") in TERMINAL_EVENT_NAMES:
                return int(line["recorded_at"])
        elif e.type in TERMINAL_EVENT_NAMES:
            return e.recorded_at
    return fallback
