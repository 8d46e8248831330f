"""The run index's writes (orchestrator/io/redis/run_index.py), as queued in the projector's
transaction: one member per run in each sorted set, a status change moving it, the end
time from the terminal event, attributes replaced or removed; the same writes again on a
replay. Recorded here on a fake pipeline; over real Redis in
tests/integration/test_run_search.py."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from orchestrator import SearchAttribute, SearchKind, State, WorkflowDefinition
from orchestrator.domain.model.messages import Envelope, WorkflowCompleted
from orchestrator.domain.model.state import WorkflowState
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.io.redis.run_index import RunIndex, keyword_score


class Inp(BaseModel):
    supplier: str
    amount: float | None = None


DEFN = WorkflowDefinition(
    "pay",
    2,
    Inp,
    [State("s", complete=lambda ctx: 1)],
    search_attributes=[
        SearchAttribute("supplier", SearchKind.KEYWORD, lambda ctx: ctx.input.supplier),
        SearchAttribute("amount", SearchKind.NUMBER, lambda ctx: ctx.input.amount),
    ],
)
P = "keel:t:rm:"


class Pipe:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def zadd(self, key: str, mapping: dict[str, Any]) -> None:
        self.calls.append(("ZADD", key, *next(iter(mapping.items()))))

    def zrem(self, key: str, member: str) -> None:
        self.calls.append(("ZREM", key, member))


def _state(status: str = "running", **over: Any) -> WorkflowState:
    base: dict[str, Any] = {
        "workflow_id": "wf",
        "run_id": "r",
        "name": "pay",
        "version": 2,
        "digest": "d",
        "input_json": '{"supplier": "ACME", "amount": 12.5}',
        "seq": 1,
        "status": status,
        "started_at": 1000,
        "updated_at": 1000,
    }
    return WorkflowState(**{**base, **over})


def _queue(state: WorkflowState, events: Any, old: str | None, restarted: bool) -> Any:
    pipe = Pipe()
    row = RunIndex(Keyspace("t"), {("pay", 2): DEFN}).queue(
        pipe, "wf", state, events, old, restarted
    )
    return pipe.calls, row


def test_a_new_run_joins_its_name_status_version_and_attribute_indexes() -> None:
    calls, row = _queue(_state(), [], None, True)
    assert calls == [
        ("ZADD", f"{P}ix:name:pay", "wf", 1000),
        ("ZADD", f"{P}ix:status:running", "wf", 1000),
        ("ZREM", f"{P}ix:ended", "wf"),
        ("ZADD", f"{P}ix:version", "wf", 2),
        ("ZADD", f"{P}ix:kw:supplier", "wf", keyword_score("ACME")),
        ("ZADD", f"{P}ix:num:amount", "wf", 12.5),
    ]
    assert row == {
        "ended_at": "",
        "search_json": '{"amount":12.5,"supplier":"ACME"}',
        "search_problems": "",
    }


def test_an_ending_moves_the_run_and_records_the_terminal_events_time() -> None:
    done = Envelope("m", "wf", "r", 3, "WorkflowCompleted", 4242, WorkflowCompleted("{}"))
    later = json.dumps({"seq": 4, "type": "SignalIgnored", "recorded_at": 5000, "data": {}})
    state = _state("completed", seq=4, updated_at=5000)
    calls, row = _queue(state, [done, later], "running", False)
    assert calls[:3] == [
        ("ZREM", f"{P}ix:status:running", "wf"),
        ("ZADD", f"{P}ix:status:completed", "wf", 1000),
        ("ZADD", f"{P}ix:ended", "wf", 4242),
    ]
    assert row["ended_at"] == 4242
    # the terminal event as a history line (the hand-off's form) gives the same time
    line = json.dumps({"seq": 3, "type": "WorkflowCompleted", "recorded_at": 4242, "data": {}})
    assert _queue(state, [line], "running", False) == (calls, row)


def test_no_status_change_writes_only_version_and_attributes() -> None:
    calls, row = _queue(
        _state(input_json='{"supplier": "B"}', seq=2), [], "running", restarted=False
    )
    assert calls == [
        ("ZADD", f"{P}ix:version", "wf", 2),
        ("ZADD", f"{P}ix:kw:supplier", "wf", keyword_score("B")),
        ("ZREM", f"{P}ix:num:amount", "wf"),  # no value now: out of the index
    ]
    assert row == {"search_json": '{"supplier":"B"}', "search_problems": ""}


def test_a_run_whose_version_this_process_lacks_is_indexed_without_attributes() -> None:
    calls, row = _queue(_state(version=3), [], "running", False)
    assert calls == [("ZADD", f"{P}ix:version", "wf", 3)]
    assert row == {}


def test_a_replayed_update_queues_the_same_writes() -> None:
    assert _queue(_state(), [], None, True) == _queue(_state(), [], None, True)
