"""Finding runs (docs/run-search.md): twelve runs of two workflows with different search
attributes, found by attribute equality, numeric and time range, status and name, start
and end time, a page of five at a time (every run once, in start order), through
``KeelClient.list_runs`` and ``keel workflow list --json``; after ``keel projections
rebuild`` every answer is the same.

Real broker, real Redis, real orchestrator (with its projector) and worker processes. The
start and end times expected come from each run's history, not from the index.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import pytest

from orchestrator import InvalidInputError, KeelClient, RunFilter
from tests.integration.search_app import APP, app
from tests.integration.test_read_model import keel
from tests.support import wait_until

HELD = {"o03", "o06", "o09"}


def _runs() -> dict[str, dict[str, Any]]:
    """o01..o09 are orders (o03, o06, o09 held), r10..r12 refunds; odd ones are acme's."""
    out = {}
    for i in range(1, 13):
        wf = f"o{i:02d}" if i <= 9 else f"r{i:02d}"
        out[wf] = {
            "order_no": wf,
            "customer": "acme" if i % 2 else "globex",
            "amount": i * 100,
            "due": date(2026, 12, i).isoformat(),
            "hold": wf in HELD,
        }
    return out


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _ids(client: KeelClient, **filters: Any) -> list[str]:
    """Every run the filter finds, walking its pages; each page checked against the total."""
    found: list[str] = []
    cursor = None
    while True:
        page = client.list_runs(RunFilter(**filters, cursor=cursor))
        found += [r.workflow_id for r in page.rows]
        cursor = page.next_cursor
        if cursor is None:
            assert len(found) == page.total
            return found


def _cli(settings, *args: str) -> dict[str, Any]:
    done = keel(settings, "workflow", "list", *args, "--json", "--app", APP)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _cli_ids(settings, *args: str) -> list[str]:
    found: list[str] = []
    cursor: list[str] = []
    while True:
        page = _cli(settings, *args, *cursor)
        found += [r["workflow_id"] for r in page["rows"]]
        if page["next_cursor"] is None:
            assert len(found) == page["total"]
            return found
        cursor = ["--cursor", page["next_cursor"]]


#: The questions asked before and after a rebuild: (client filter, CLI arguments).
QUESTIONS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "acme": ({"attributes": ["customer=acme"]}, ["--attr", "customer=acme"]),
    "one order": ({"attributes": ["shipment=SHIP-o02"]}, ["--attr", "shipment=SHIP-o02"]),
    "300 to 700": (
        {"attributes": ["amount>=300", "amount<=700"]},
        ["--attr", "amount>=300", "--attr", "amount<=700"],
    ),
    "over 650 under 1100": (
        {"attributes": ["amount>650", "amount<1100"]},
        ["--attr", "amount>650", "--attr", "amount<1100"],
    ),
    "due from the 10th": (
        {"attributes": ["due>=2026-12-10"]},
        ["--attr", "due>=2026-12-10T00:00:00Z"],
    ),
    "held orders": (
        {"status": "waiting", "name": "shop_order"},
        ["--status", "waiting", "--name", "shop_order"],
    ),
    "refunds done": (
        {"status": "completed", "name": "shop_refund", "version": 1},
        ["--status", "completed", "--name", "shop_refund", "--version", "1"],
    ),
    "globex orders done": (
        {"status": "completed", "name": "shop_order", "attributes": ["customer=globex"]},
        ["--status", "completed", "--name", "shop_order", "--attr", "customer=globex"],
    ),
    "everything, oldest first": ({"newest_first": False}, ["--oldest-first"]),
    "everything": ({}, []),
}


def _expected(starts: dict[str, int], ends: dict[str, int]) -> dict[str, list[str]]:
    def newest(ids: set[str]) -> list[str]:
        return sorted(ids, key=lambda wf: (starts[wf], wf), reverse=True)

    every = set(starts)
    return {
        "acme": newest({"o01", "o03", "o05", "o07", "o09", "r11"}),
        "one order": ["o02"],
        "300 to 700": newest({"o03", "o04", "o05", "o06", "o07"}),
        "over 650 under 1100": newest({"o07", "o08", "o09", "r10"}),
        "due from the 10th": newest({"r10", "r11", "r12"}),
        "held orders": newest(HELD),
        "refunds done": newest({"r10", "r11", "r12"}),
        "globex orders done": newest({"o02", "o04", "o08"}),
        "everything, oldest first": newest(every)[::-1],
        "everything": newest(every),
    }


def _answers(client: KeelClient, settings=None) -> dict[str, Any]:
    """Every question's full first page (rows with times and attributes) by the client,
    and the ids it finds walking pages of five through the client (and, given the
    settings, through the CLI)."""
    out: dict[str, Any] = {}
    for key, (filters, args) in QUESTIONS.items():
        out[key] = {
            "page": client.list_runs(RunFilter(**filters)).as_dict(),
            "client": _ids(client, **filters, limit=5),
        }
        if settings is not None:
            out[key]["cli"] = _cli_ids(settings, *args, "--limit", "5")
    return out


def test_runs_are_found_by_attribute_status_name_and_time_a_page_at_a_time(
    settings, services
) -> None:
    client = KeelClient(settings, app)
    try:
        services.start("orchestrator", "--app", APP)
        services.start("worker", "--app", APP)
        runs = _runs()
        for wf, order in runs.items():
            client.start("shop_order" if wf.startswith("o") else "shop_refund", order, wf)
        for wf in runs:
            if wf in HELD:
                wait_until(lambda w=wf: client.projection.status(w) == "waiting", 90, wf)
            else:
                assert client.wait(wf, 90).status == "completed"

        histories = {wf: client.show(wf).history for wf in runs}
        starts = {wf: h[0]["recorded_at"] for wf, h in histories.items()}
        ends = {
            wf: h[-1]["recorded_at"]
            for wf, h in histories.items()
            if h[-1]["type"] == "WorkflowCompleted"
        }
        assert set(ends) == set(runs) - HELD
        expected = _expected(starts, ends)

        before = _answers(client, settings)
        for key, want in expected.items():
            assert before[key]["client"] == want, key
            assert before[key]["cli"] == want, key
            page = before[key]["page"]
            assert [r["workflow_id"] for r in page["rows"]] == want, key
            assert page["total"] == len(want) and page["next_cursor"] is None, key

        # a row: its times (from the history) and its attributes
        (row,) = client.list_runs(RunFilter(attributes=["shipment=SHIP-o02"])).as_dict()["rows"]
        assert row == {
            "workflow_id": "o02",
            "run_id": row["run_id"],
            "name": "shop_order",
            "version": 1,
            "status": "completed",
            "state": "done",
            "started_at": _iso(starts["o02"]).replace("+00:00", "Z"),
            "updated_at": _iso(ends["o02"]).replace("+00:00", "Z"),
            "ended_at": _iso(ends["o02"]).replace("+00:00", "Z"),
            "attributes": {
                "amount": 200,
                "customer": "globex",
                "due": "2026-12-02T00:00:00.000Z",
                "shipment": "SHIP-o02",
            },
        }

        # pages of five: 5, 5, 2, newest first, none twice, none missing
        sizes, cursor, seen = [], None, []
        while True:
            page = client.list_runs(RunFilter(limit=5, cursor=cursor))
            sizes.append(len(page.rows))
            seen += [r.workflow_id for r in page.rows]
            assert page.total == 12
            if (cursor := page.next_cursor) is None:
                break
        assert (sizes, seen) == ([5, 5, 2], expected["everything"])

        # time ranges: [after, before), bounds from the histories
        window = {"started_after": _iso(starts["o04"]), "started_before": _iso(starts["o08"])}
        # runs may start in the same millisecond: the window is what the histories say
        inside = sorted(
            (wf for wf, t in starts.items() if starts["o04"] <= t < starts["o08"]),
            key=lambda wf: (starts[wf], wf),
        )
        assert "o04" in inside and "o08" not in inside
        assert _ids(client, **window) == inside[::-1]
        assert (
            _cli_ids(
                settings,
                "--started-after",
                window["started_after"],
                "--started-before",
                window["started_before"],
                "--oldest-first",
            )
            == inside
        )
        # every end time as a cut (runs may end in the same millisecond)
        for cut in sorted(set(ends.values())):
            late = {wf for wf, t in ends.items() if t >= cut}
            assert set(_ids(client, ended_after=_iso(cut))) == late, cut
            assert set(_ids(client, ended_before=_iso(cut))) == set(ends) - late, cut

        # live counts per status
        counts = client.counts_by_status()
        assert {k: v for k, v in counts.items() if v} == {"completed": 9, "waiting": 3}

        # the text table ends with the next page's cursor, the same the client gives
        text = keel(settings, "workflow", "list", "--limit", "5", "--app", APP)
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[-2] == "5 of 12 run(s)"
        first = client.list_runs(RunFilter(limit=5))
        assert lines[-1] == f"next page: --cursor {first.next_cursor}"

        # bad filters are refused, naming the bad part
        with pytest.raises(InvalidInputError) as refused:
            client.list_runs(RunFilter(attributes=["colour=red"]))
        assert str(refused.value) == (
            "--attr colour=red: unknown search attribute 'colour' (declared: amount, customer, "
            "due, shipment)"
        )
        for args, message in (
            (
                ["--attr", "colour=red"],
                "--attr colour=red: unknown search attribute 'colour' (declared: amount, "
                "customer, due, shipment)",
            ),
            (
                ["--started-after", "last tuesday"],
                "started_after: 'last tuesday' is not an ISO-8601 time (e.g. 2026-12-03T10:00:00Z)",
            ),
            (
                ["--cursor", "bm90IGEgY3Vyc29y"],
                "cursor: 'bm90IGEgY3Vyc29y' is not a cursor a listing printed",
            ),
            (
                ["--name", "shop_order", "--cursor", str(first.next_cursor)],
                "cursor: it belongs to a listing with other filters or another order; use it "
                "with the same filters, or start again without a cursor",
            ),
            (
                ["--attr", "customer>=a"],
                "--attr customer>=a: search attribute 'customer' (keyword) is a keyword: only "
                "'=' applies",
            ),
        ):
            done = keel(settings, "workflow", "list", *args, "--app", APP)
            assert (done.returncode, done.stdout, done.stderr) == (1, "", f"error: {message}\n")

        # a rebuild of the read model gives every answer again, row for row
        rebuilt = keel(settings, "projections", "rebuild", "--app", APP)
        assert rebuilt.returncode == 0, rebuilt.stderr
        after = _answers(client)
        assert after == {k: {n: v[n] for n in ("page", "client")} for k, v in before.items()}
        assert _cli_ids(settings, *QUESTIONS["acme"][1], "--limit", "5") == expected["acme"]
        assert client.counts_by_status() == counts
    finally:
        client.close()
