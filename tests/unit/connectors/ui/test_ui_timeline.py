"""A run's history as the UI's timeline (connectors/ui/timeline.py) and the runs page's
query (connectors/ui/run_listing.py): pure, no servers."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.ui.run_listing import RunQuery
from connectors.ui.timeline import EntryKind, timeline
from orchestrator.domain.model.errors import InvalidInputError


def _h(seq: int, at: int, kind: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "recorded_at": at, "data": data}


HISTORY = [
    _h(1, 1_000, "WorkflowStarted", name="review", version=2, input={"n": 1}),
    _h(2, 1_000, "StateEntered", state="classify", visit=1),
    _h(
        3,
        1_000,
        "ActivityScheduled",
        activity_id="a#1/x",
        activity_type="llm.x",
        step="x",
        logical_attempt=1,
        attempt=1,
        idempotency_key="k",
    ),
    _h(
        4,
        1_500,
        "ActivityFailed",
        activity_id="a#1/x",
        attempt=1,
        failure_class="transient",
        error_type="HTTPError",
        message="503",
        retry_after_ms=2_000,
    ),
    _h(5, 1_500, "TimerScheduled", timer_id="t", fire_at=3_500, purpose="retry:a#1/x"),
    _h(
        6,
        4_000,
        "ActivityCompleted",
        activity_id="a#1/x",
        attempt=2,
        result={"llm": {"validation": {"valid": True, "repairs": 1}}},
    ),
    _h(
        7,
        4_000,
        "ActivityScheduled",
        activity_id="a#1/x/query/2",
        activity_type="status",
        step="x",
        logical_attempt=1,
        attempt=1,
        idempotency_key="q",
    ),
    _h(
        8,
        5_000,
        "ActivityResolved",
        activity_id="a#1/x",
        resolution="completed",
        reason="checked the ledger",
    ),
    _h(
        9,
        5_000,
        "ActivityScheduled",
        activity_id="a#1/x/undo",
        activity_type="refund",
        step="x",
        logical_attempt=1,
        attempt=1,
        idempotency_key="u",
    ),
    _h(10, 6_000, "StateEntered", state="approval", visit=1),
    _h(
        11,
        66_000,
        "HumanTaskDecided",
        task_id="t1",
        decision="approve",
        actor="alice",
        operation_digest="ab" * 32,
        decided_at=66_000,
        reason_digest="",
        evidence_digest="",
    ),
    _h(12, 66_000, "WorkflowCompleted", output={"ok": True}),
]
LLM = {
    "provenance": [
        {
            "seq": 6,
            "activity_type": "llm.x",
            "model": "m-1",
            "prompt": "p@1",
            "tokens": {"prompt": 31, "completion": 7, "total": 38},
            "cost_usd": 0.000148,
            "cache": "miss",
        }
    ]
}


def test_each_event_is_an_entry_in_order_with_what_it_means() -> None:
    entries = timeline(HISTORY, LLM, now_ms=100_000)
    assert [(e.seq, e.kind, e.title) for e in entries] == [
        (1, EntryKind.RUN, "started review v2"),
        (2, EntryKind.STATE, "entered state classify"),
        (3, EntryKind.ACTIVITY, "activity a#1/x scheduled"),
        (4, EntryKind.FAILURE, "activity a#1/x failed (attempt 1)"),
        (5, EntryKind.TIMER, "retry timer for a#1/x"),
        (6, EntryKind.LLM, "LLM call llm.x completed"),
        (7, EntryKind.UNKNOWN, "status query a#1/x/query/2 scheduled (outcome unknown)"),
        (8, EntryKind.UNKNOWN, "unknown outcome of a#1/x settled: completed"),
        (9, EntryKind.COMPENSATION, "compensation a#1/x/undo scheduled"),
        (10, EntryKind.STATE, "entered state approval"),
        (11, EntryKind.APPROVAL, "human task t1: approve by alice"),
        (12, EntryKind.RUN, "workflow completed"),
    ]
    details = {e.seq: dict(e.details) for e in entries}
    assert details[2]["time in state"] == "5.0 s"  # until the next state
    assert details[10]["time in state"] == "1 min 0 s"  # until the run's end
    assert details[4] == {
        "failure class": "transient",
        "error": "HTTPError: 503",
        "retry after": "2.0 s",
    }
    assert details[5] == {"fires at": "1970-01-01T00:00:03.500Z (in 2.0 s)"}
    assert details[6]["tokens"] == "prompt 31, completion 7, total 38"
    assert details[6]["cost"] == "$0.000148"
    assert details[6]["validation"] == "valid, 1 repair(s)"
    assert details[8] == {"reason": "checked the ledger"}
    assert details[11]["operation digest"] == "ab" * 32


def test_the_state_a_running_run_is_in_counts_until_now() -> None:
    entries = timeline(HISTORY[:2], {}, now_ms=3_500)
    assert entries[1].details[-1] == ("in state for", "2.5 s so far")


def test_the_runs_query_keeps_its_filter_in_the_links() -> None:
    query = RunQuery.of(
        {"name": "review", "status": "waiting", "order": "oldest", "started_after": "2026-12-01"},
        ["supplier=ACME Tools", "", "amount>=100"],
    )
    assert query.attributes == ("supplier=ACME Tools", "amount>=100")
    assert query.link() == (
        "name=review&status=waiting&started_after=2026-12-01&attr=supplier%3DACME+Tools"
        "&attr=amount%3E%3D100&order=oldest"
    )
    assert query.link(cursor="c1", page=2).endswith("&order=oldest&cursor=c1&page=2")
    found = query.run_filter(25)
    assert (found.name, found.status, found.newest_first, found.limit) == (
        "review",
        "waiting",
        False,
        25,
    )
    with pytest.raises(InvalidInputError, match="version: expected a number, got 'two'"):
        RunQuery(version="two").run_filter(25)


def test_a_held_continue_says_the_continue_budget_holds_it() -> None:
    held = [
        _h(1, 1_000, "WorkflowStarted", name="loop", version=1, input={}),
        _h(
            2,
            1_000,
            "TimerScheduled",
            timer_id="s#1@9/continue",
            fire_at=61_000,
            purpose="continue",
        ),
    ]
    entry = timeline(held, {}, now_ms=2_000)[1]
    assert (entry.kind, entry.title) == (
        EntryKind.TIMER,
        "continue as new held by the continue budget",
    )
    assert dict(entry.details)["fires at"].endswith("(in 1 min 0 s)")
