"""``replay`` checks code against a recorded history; ``ActivityEnvironment`` runs one
handler with the context a worker gives it; every history passes the invariants."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from orchestrator import KeelApp, State, WorkflowDefinition, activity
from orchestrator.activity import TransientError
from orchestrator.domain.model.messages import ActivityScheduled
from orchestrator.testing import (
    ActivityEnvironment,
    HistoryInvariantError,
    ReplayDivergedError,
    WorkflowEnvironment,
    replay,
)
from tests.unit.testing.kit_app import LEDGER, Order, app, charge_card

ORDER = {"order_id": "o-1", "amount": 120.0}


def _recorded(tmp_path: Path) -> Path:
    with WorkflowEnvironment(app) as env:
        env.fail(charge_card, TransientError("503"))
        run = env.start("order_approval", ORDER, workflow_id="o-1")
        run.approve(run.human_task(), actor="ann")
        run.result()
        path = tmp_path / "o-1.jsonl"
        assert run.export(path) == len(run.history())
    return path


def test_a_recorded_history_replays_identically(tmp_path: Path) -> None:
    path = _recorded(tmp_path)
    (report,) = replay(app, path)
    assert report.ok and report.name == "order_approval"
    # every decision is made again but the person's (its proof is not repeated: folded)
    assert report.folded_types == ["HumanTaskDecided"]
    assert report.redecided == report.groups - 1


def test_code_that_decides_otherwise_is_caught_with_the_first_difference(
    tmp_path: Path,
) -> None:
    path = _recorded(tmp_path)
    changed = KeelApp("changed")
    changed.include(app)
    # same name and version, another output once charged: an unversioned, breaking edit
    original = app.get("order_approval")
    changed.definitions = dict(changed.definitions)
    changed.definitions[("order_approval", 1)] = WorkflowDefinition(
        "order_approval",
        1,
        Order,
        [
            original.states["approval"],
            State("charge", steps=original.states["charge"].steps, complete=lambda c: "paid"),
            original.states["rejected"],
        ],
    )
    with pytest.raises(ReplayDivergedError, match=r"1 of 1 run\(s\) diverge") as caught:
        replay(changed, path)
    message = str(caught.value)
    assert "'o-1' (order_approval v1)" in message
    assert "edited in place" in message
    assert "deciding CompleteActivity" in message
    expected, got = message.split("\n  expected: ")[1].split("\n  got:      ")
    assert "WorkflowCompleted" in expected and "charged" in expected
    assert "WorkflowCompleted" in got and "paid" in got and "charged" not in got


def test_the_activity_environment_gives_a_handler_its_context() -> None:
    beats: list[Any] = []

    def long_export(inp: dict[str, Any]) -> str:
        ctx = activity.context()
        for i in range(3):
            ctx.heartbeat({"done": i})
            if i == 1:
                env.clock.advance(1.0)  # a third of the 3 s heartbeat timeout
        beats.append(ctx.attempt)
        return ctx.idempotency_key

    env = ActivityEnvironment(
        workflow_id="wf-9", activity_type="export", attempt=2, heartbeat_ms=3000
    )
    assert env.run(long_export, {}) == "wf-9/export/1"
    assert env.heartbeats == [{"done": 0}, {"done": 2}]  # spaced 1 s on the manual clock
    assert beats == [2]


def test_an_async_handler_runs_in_the_activity_environment() -> None:
    async def lookup(inp: dict[str, Any]) -> dict[str, Any]:
        return {"key": activity.context().idempotency_key, **inp}

    env = ActivityEnvironment(idempotency_key="K-1")
    assert env.run(lookup, {"n": 1}) == {"key": "K-1", "n": 1}


def test_execute_runs_a_side_effect_once_per_idempotency_key() -> None:
    LEDGER.clear()
    env = ActivityEnvironment(workflow_id="o-7", logical_attempt=1)
    first = env.execute(app, charge_card, Order(order_id="o-7", amount=3))
    again = env.execute(app, "charge_card", {"order_id": "o-7", "amount": 3})
    assert first == again == {"charge_id": "ch-o-7", "amount": 3.0}
    assert list(LEDGER) == ["o-7/charge_card/1"]
    with pytest.raises(Exception, match="amount"):
        env.execute(app, charge_card, {"order_id": "o-8"})  # the input model refuses it


def test_a_broken_history_is_caught_when_the_environment_closes() -> None:
    env = WorkflowEnvironment(app)
    run = env.start("charge_order", ORDER, workflow_id="o-1")
    run.result()
    # a second scheduling of an attempt already scheduled: never written by the engine
    (scheduled,) = [e for e in run.history() if isinstance(e.payload, ActivityScheduled)]
    forged = dataclasses.replace(scheduled, seq=len(run.history()) + 1, message_id="forged")
    env.broker.produce(env.topics.events, env.codec.encode(forged), b"o-1")
    with pytest.raises(HistoryInvariantError, match="invariant violation"):
        env.close()
