"""Child workflows on the real stack (docs/child-workflows.md): a parent maps a child run
over its input and completes with their outputs in order, each child's history names
its parent and ``keel workflow show`` links both ways; cancelling a parent cancels the
children it awaits, or terminates them when the step says so."""

from __future__ import annotations

import json

import pytest

from orchestrator.client.client import KeelClient
from tests.integration import parent_close_app
from tests.integration.test_read_model import keel
from tests.support import assert_sound_history, histories, wait_until


def _checks(n: int) -> dict[str, int]:
    return {"result": (n + 1) + 2 * n + n * n}


def test_a_parent_completes_with_its_childrens_outputs_in_order(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    numbers = [3, 1, 4, 1, 5, 9]
    client.start("checks_batch", {"numbers": numbers}, workflow_id="batch-c")
    row = client.wait("batch-c", 90)
    assert row.status == "completed", row
    assert row.output == {"results": [_checks(n) for n in numbers]}

    children = [f"batch-c:run.1.checks.{i}" for i in range(len(numbers))]
    by_wf = histories(settings)
    assert sorted(by_wf) == sorted(["batch-c", *children])
    for i, wf in enumerate(children):
        events = by_wf[wf]
        assert_sound_history(wf, events)
        (started,) = [e.payload for e in events if e.type == "WorkflowStarted"]
        assert (started.parent_workflow_id, started.parent_activity_id) == (
            "batch-c",
            f"run#1/checks[{i}]",
        )
        assert client.wait(wf, 5).output == _checks(numbers[i])
    assert_sound_history("batch-c", by_wf["batch-c"])

    shown = keel(settings, "workflow", "show", "batch-c", COLUMNS="300")
    assert shown.returncode == 0, shown.stderr
    for i, wf in enumerate(children):
        line = f"child: {wf} (parallel_checks, completed) for activity run#1/checks[{i}]"
        assert line in shown.stdout, shown.stdout
    shown = keel(settings, "workflow", "show", children[2], COLUMNS="300")
    assert "parent: batch-c (its activity run#1/checks[2])" in shown.stdout, shown.stdout


def test_cancelling_the_parent_cancels_the_children_it_awaits(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    client.start("timers_batch", {"seconds": [600, 600, 600]}, workflow_id="batch-t")
    children = [f"batch-t:run.1.timers.{i}" for i in range(3)]
    wait_until(
        lambda: all(
            (client.projection.get(wf) or {}).get("status") == "waiting" for wf in children
        ),
        60,
        "three children waiting on their timers",
    )
    client.cancel("batch-t", reason="the batch was withdrawn")
    assert client.wait("batch-t", 60).status == "cancelled"
    for wf in children:
        row = client.wait(wf, 60)
        assert row.status == "cancelled", row
    by_wf = histories(settings)
    for wf in children:
        (cancelled,) = [e for e in by_wf[wf] if e.type == "WorkflowCancelled"]
        assert cancelled.payload.reason == "its parent 'batch-t' (cancelled) stopped awaiting it"
        assert_sound_history(wf, by_wf[wf])
    assert_sound_history("batch-t", by_wf["batch-t"])


@pytest.mark.parametrize(
    ("parent", "ended", "compensated"),
    [("seats_cancel", "cancelled", True), ("seats_terminate", "terminated", False)],
)
def test_the_parent_close_policy_says_how_the_children_stop(
    settings, services, parent, ended, compensated
):
    """Cancelling the parent cancels its children (each releases its seat first) under
    ``parent_close="cancel"``, and terminates them (the seat kept, nothing compensated)
    under ``"terminate"``."""
    services.start("orchestrator", "--app", parent_close_app.APP)
    services.start("worker", "--app", parent_close_app.APP)
    client = KeelClient(settings, parent_close_app.app)
    try:
        wf = f"seats-{ended}"
        client.start(parent, {"seats": ["1A", "1B"]}, workflow_id=wf)
        children = [f"{wf}:run.1.seats.{i}" for i in range(2)]
        wait_until(
            lambda: all(
                (client.projection.get(c) or {}).get("status") == "waiting" for c in children
            ),
            60,
            "both children holding a seat and waiting",
        )
        client.cancel(wf, reason="the group booking was withdrawn")
        assert client.wait(wf, 60).status == "cancelled"
        for c in children:
            assert client.wait(c, 60).status == ended
    finally:
        client.close()
    by_wf = histories(settings)
    why = f"its parent '{wf}' (cancelled) stopped awaiting it"
    for i, c in enumerate(children):
        events = by_wf[c]
        assert_sound_history(c, events)
        assert events[-1].type == ("WorkflowCancelled" if compensated else "WorkflowTerminated")
        assert events[-1].payload.reason == why
        undone = [e.payload.result_json for e in events if e.type == "ActivityCompleted"]
        released = [json.loads(r) for r in undone if "released" in r]
        assert released == ([{"released": f"H-{'1A' if i == 0 else '1B'}"}] if compensated else [])
        assert any(e.type == "CompensationStarted" for e in events) is compensated
    assert_sound_history(wf, by_wf[wf])
