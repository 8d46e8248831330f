"""Finding runs (orchestrator/client/run_search.py): a filter is checked when built and when
searched, each bad part named; it becomes the index query the read model answers; a cursor
continues only its own listing. The read model here records the query it is asked (the
answers over real Redis: tests/integration/test_run_search.py)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator import (
    InvalidInputError,
    RunFilter,
    SearchAttribute,
    SearchKind,
    State,
    WorkflowDefinition,
    WorkflowStatus,
)
from orchestrator.client.run_search import (
    AttributeCondition,
    AttrOp,
    RunPage,
    RunRow,
    _encode_cursor,
    counts_by_status,
    parse_time,
    search_runs,
)
from orchestrator.io.redis.run_index import IndexedRun, IndexQuery, Range, keyword_score

NOON = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[3] / "docs"
NOON_MS = 1_796_299_200_000


class Inp(BaseModel):
    supplier: str
    amount: float


def _defn(name: str, *attributes: SearchAttribute) -> WorkflowDefinition:
    return WorkflowDefinition(
        name, 1, Inp, [State("s", complete=lambda ctx: 1)], search_attributes=attributes
    )


SUPPLIER = SearchAttribute("supplier", SearchKind.KEYWORD, lambda ctx: ctx.input.supplier)
AMOUNT = SearchAttribute("amount", SearchKind.NUMBER, lambda ctx: ctx.input.amount)
DUE = SearchAttribute("due", SearchKind.TIME, lambda ctx: None)
DEFS = {("pay", 1): _defn("pay", SUPPLIER, AMOUNT, DUE)}


class Recorder:
    """A read model that records the query and answers with ``found``."""

    def __init__(self, found: Any = ([], 0, None)) -> None:
        self.queries: list[IndexQuery] = []
        self.found = found

    def find_runs(self, query: IndexQuery) -> Any:
        self.queries.append(query)
        return self.found


def _query(run_filter: RunFilter, defs: Any = None) -> IndexQuery:
    rec = Recorder()
    search_runs(rec, DEFS if defs is None else defs, run_filter)  # type: ignore[arg-type]
    return rec.queries[0]


def _error(fn: Any) -> str:
    with pytest.raises(InvalidInputError) as exc:
        fn()
    return str(exc.value)


# -- conditions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "op", "value"),
    [
        ("supplier=ACME Ltd", "supplier", AttrOp.EQ, "ACME Ltd"),
        ("amount>=100", "amount", AttrOp.GE, "100"),
        ("amount <= 2.5", "amount", AttrOp.LE, " 2.5"),
        ("amount>0", "amount", AttrOp.GT, "0"),
        ("due<2026-12-31", "due", AttrOp.LT, "2026-12-31"),
        ("note=a=b", "note", AttrOp.EQ, "a=b"),
    ],
)
def test_a_condition_is_parsed_from_its_text(text: str, name: str, op: AttrOp, value: str) -> None:
    assert AttributeCondition.parse(text) == AttributeCondition(name, op, value)


@pytest.mark.parametrize("text", ["amount", "=3", "9x=1", ""])
def test_a_condition_without_a_name_and_operator_is_refused(text: str) -> None:
    assert _error(lambda: AttributeCondition.parse(text)) == (
        f"--attr {text!r}: expected NAME=VALUE, NAME>=VALUE or NAME<=VALUE (also > and <)"
    )


def test_times_are_iso_8601_and_utc_without_a_zone() -> None:
    assert parse_time("2026-12-03T12:00:00Z", "t") == NOON
    assert parse_time("2026-12-03T13:00:00+01:00", "t") == NOON
    assert parse_time("2026-12-03T12:00", "t") == NOON
    assert _error(lambda: parse_time("yesterday", "started_after")) == (
        "started_after: 'yesterday' is not an ISO-8601 time (e.g. 2026-12-03T10:00:00Z)"
    )


# -- the filter ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"status": "done"}, "status: unknown status 'done'; expected one of "),
        ({"limit": 0}, "limit: expected 1 to 1000, got 0"),
        ({"limit": 1001}, "limit: expected 1 to 1000, got 1001"),
        ({"version": 0}, "version: expected an int >= 1, got 0"),
        ({"ended_before": "soon"}, "ended_before: 'soon' is not an ISO-8601 time"),
        ({"attributes": ["amount"]}, "--attr 'amount': expected NAME=VALUE"),
    ],
)
def test_a_bad_filter_names_its_bad_part_when_built(kwargs: dict[str, Any], message: str) -> None:
    assert _error(lambda: RunFilter(**kwargs)).startswith(message)


def test_the_filter_becomes_the_index_query() -> None:
    q = _query(
        RunFilter(
            name="pay",
            version=1,
            status="completed",
            started_after="2026-12-03T12:00:00Z",
            started_before=NOON.replace(hour=13),
            ended_after=NOON,
            attributes=["supplier=ACME", "amount>=100", "amount<250.5", "due<=2026-12-03T12:00Z"],
            newest_first=False,
            limit=5,
        )
    )
    assert q == IndexQuery(
        name="pay",
        version=1,
        status="completed",
        started=Range(NOON_MS, NOON_MS + 3_600_000, hi_open=True),
        ended=Range(NOON_MS, math.inf, hi_open=True),
        ranges=(
            (SearchKind.NUMBER, "amount", Range(lo=100.0)),
            (SearchKind.NUMBER, "amount", Range(hi=250.5, hi_open=True)),
            (SearchKind.TIME, "due", Range(hi=float(NOON_MS))),
        ),
        keywords=(("supplier", "ACME"),),
        newest_first=False,
        after=None,
        limit=5,
    )


def test_an_empty_filter_asks_for_everything_newest_first() -> None:
    assert _query(RunFilter()) == IndexQuery()


def test_numbers_and_times_compare_by_equality_too() -> None:
    q = _query(RunFilter(attributes=["amount=5", AttributeCondition("due", AttrOp.EQ, NOON)]))
    assert q.ranges == (
        (SearchKind.NUMBER, "amount", Range(5.0, 5.0)),
        (SearchKind.TIME, "due", Range(float(NOON_MS), float(NOON_MS))),
    )


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        (
            "colour=red",
            "--attr colour=red: unknown search attribute 'colour' (declared: amount, due, "
            "supplier)",
        ),
        (
            "supplier>=A",
            "--attr supplier>=A: search attribute 'supplier' (keyword) is a keyword: only '=' "
            "applies",
        ),
        (
            "amount>=lots",
            "--attr amount>=lots: search attribute 'amount' (number) takes a number, got 'lots'",
        ),
        (
            "amount=inf",
            "--attr amount=inf: search attribute 'amount' (number) takes a number, got 'inf'",
        ),
        ("due>=monday", "--attr due>=monday: 'monday' is not an ISO-8601 time"),
    ],
)
def test_a_bad_attribute_condition_is_named_when_searched(condition: str, message: str) -> None:
    assert _error(lambda: _query(RunFilter(attributes=[condition]))).startswith(message)


def test_an_attribute_declared_with_two_kinds_cannot_be_searched_but_others_can() -> None:
    other = SearchAttribute("amount", SearchKind.KEYWORD, lambda ctx: "x")
    defs = {**DEFS, ("bill", 1): _defn("bill", other)}
    assert _error(lambda: _query(RunFilter(attributes=["amount=1"]), defs)) == (
        "--attr amount=1: search attribute 'amount' is declared with different kinds "
        "(number by workflow 'pay' v1; keyword by workflow 'bill' v1); give it one kind in "
        "every workflow"
    )
    assert _query(RunFilter(attributes=["supplier=ACME"]), defs).keywords == (("supplier", "ACME"),)


# -- pages and cursors ----------------------------------------------------------------


def _run(wf: str, started: int, **over: Any) -> IndexedRun:
    base: dict[str, Any] = {
        "workflow_id": wf,
        "run_id": "r",
        "name": "pay",
        "version": 1,
        "status": "completed",
        "state": None,
        "started_at": started,
        "updated_at": started + 5,
        "ended_at": started + 5,
        "attributes": {"supplier": "ACME", "due": NOON_MS},
    }
    return IndexedRun(**{**base, **over})


def test_a_page_carries_a_cursor_that_continues_only_its_own_listing() -> None:
    run_filter = RunFilter(name="pay", limit=1)
    rec = Recorder(([_run("a", NOON_MS)], 2, (float(NOON_MS), "a")))
    page = search_runs(rec, DEFS, run_filter)  # type: ignore[arg-type]
    assert page.total == 2 and page.next_cursor is not None
    assert page.rows == [
        RunRow(
            workflow_id="a",
            run_id="r",
            name="pay",
            version=1,
            status="completed",
            state=None,
            started_at=NOON,
            updated_at=datetime(2026, 12, 3, 12, 0, 0, 5000, tzinfo=UTC),
            ended_at=datetime(2026, 12, 3, 12, 0, 0, 5000, tzinfo=UTC),
            attributes={"supplier": "ACME", "due": NOON},
        )
    ]
    assert page.as_dict()["rows"][0]["started_at"] == "2026-12-03T12:00:00.000Z"
    assert page.as_dict()["rows"][0]["attributes"] == {
        "supplier": "ACME",
        "due": "2026-12-03T12:00:00.000Z",
    }
    # the next page starts after the last row
    nxt = RunFilter(name="pay", limit=1, cursor=page.next_cursor)
    assert _query(nxt).after == (float(NOON_MS), "a")
    # with another filter or order the cursor is refused
    for other in (
        RunFilter(name="bill", cursor=page.next_cursor),
        RunFilter(name="pay", newest_first=False, cursor=page.next_cursor),
    ):
        assert _error(lambda o=other: _query(o)) == (
            "cursor: it belongs to a listing with other filters or another order; use it "
            "with the same filters, or start again without a cursor"
        )
    # the limit is not part of the listing: a page size may change between pages
    assert _query(RunFilter(name="pay", limit=7, cursor=page.next_cursor)).limit == 7


def test_the_last_page_has_no_cursor() -> None:
    page = search_runs(Recorder(([_run("a", 1)], 1, None)), DEFS, RunFilter())  # type: ignore[arg-type]
    assert page.next_cursor is None and page.total == 1


@pytest.mark.parametrize("cursor", ["not-a-cursor", "e30", _encode_cursor((1.0, "a"), "x")[:-3]])
def test_a_garbled_cursor_is_refused(cursor: str) -> None:
    assert _error(lambda: _query(RunFilter(cursor=cursor))) == (
        f"cursor: {cursor[:40]!r} is not a cursor a listing printed"
    )


def test_a_keyword_score_is_stable_and_exact_as_a_double() -> None:
    score = keyword_score("ACME")
    assert score == keyword_score("ACME") != keyword_score("ACME ")
    assert 0 <= score < 2**52 and float(score) == score


@pytest.mark.parametrize(
    ("page", "bullet"),
    [("workflows.md", "- `list --json` prints"), ("run-search.md", "- `--json` prints")],
)
def test_the_pages_tell_the_listings_json_as_it_is_printed(page: str, bullet: str) -> None:
    told = (DOCS / page).read_text().split(bullet, 1)[1].split("\n- ", 1)[0]
    names = re.findall(r'"(\w+)"', told)
    row = RunRow("a", "r", "pay", 1, "completed", None, NOON, NOON, None)
    row_keys = list(row.as_dict())
    assert sorted(names) == sorted([*RunPage([row], None, 1).as_dict(), *row_keys])
    assert [n for n in names if n in row_keys] == row_keys  # in the order printed


def test_the_counts_by_status_are_keyed_by_plain_names() -> None:
    class Counted:
        def counts(self) -> dict[str, int]:
            return dict.fromkeys(WorkflowStatus, 0) | {WorkflowStatus.RUNNING: 3}

    counts = counts_by_status(Counted())  # type: ignore[arg-type]
    assert {type(k) for k in counts} == {str}
    assert str(counts).startswith("{'running': 3, 'waiting': 0, 'needs_attention': 0, ")
