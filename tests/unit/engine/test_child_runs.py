"""Child-workflow steps on exact event sequences, and the commands the engine derives from
them (docs/child-workflows.md; ``orchestrator/engine/child_runs.py``).

A parent's child step is an activity whose key is the child's workflow id; the child's
start names its parent; the child's end is the parent activity's report; a child the
parent stops awaiting is cancelled (or terminated) unless its step abandons it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import Decider, DefinitionError, WorkflowState
from orchestrator.domain.authoring.definitions import State, Step, WorkflowDefinition
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.keys import child_workflow_id
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CancelWorkflow,
    CompleteActivity,
    Envelope,
    FailActivity,
    StartWorkflow,
    TerminateWorkflow,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
)
from orchestrator.engine.child_runs import abandoned_children, child_start, parent_report

T0 = 1_700_000_000_000


class Order(BaseModel):
    order: str
    lines: list[int] = []


def _lines(ctx: Any) -> list[dict[str, int]]:
    return [{"n": n} for n in ctx.input.lines]


pick = WorkflowDefinition("pick", 1, Order, [State("run", complete=lambda ctx: {"picked": 1})])
parent = WorkflowDefinition(
    "parent",
    1,
    Order,
    [
        State(
            "run",
            steps=[Step.child("pick", "pick", workflow_id=lambda ctx: f"pick-{ctx.input.order}")],
            complete=lambda ctx: ctx.results["pick"],
        )
    ],
)
fanned = WorkflowDefinition(
    "fanned",
    1,
    Order,
    [
        State(
            "run",
            steps=[Step.child("lines", "pick", for_each=_lines, max_concurrency=2)],
            complete=lambda ctx: ctx.results["lines"],
        )
    ],
)
abandoning = WorkflowDefinition(
    "abandoning",
    1,
    Order,
    [
        State(
            "run",
            steps=[Step.child("lines", "pick", for_each=_lines, parent_close="abandon")],
            complete=lambda ctx: ctx.results["lines"],
        )
    ],
)
terminating = WorkflowDefinition(
    "terminating",
    1,
    Order,
    [
        State(
            "run",
            steps=[Step.child("lines", "pick", for_each=_lines, parent_close="terminate")],
            complete=lambda ctx: ctx.results["lines"],
        )
    ],
)
DECIDER = Decider([pick, parent, fanned, abandoning, terminating])


class Run:
    def __init__(self, wid: str) -> None:
        self.wid = wid
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0

    def send(self, payload: Any) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        self.n += 1
        env = Envelope(
            f"{self.wid}-cmd-{self.n}", self.wid, "", 0, type(payload).__name__, T0, payload
        )
        before = self.state
        self.state, events = DECIDER.handle(self.state, env, now_ms=T0 + self.n)
        self.history.extend(events)
        return before, events


def test_a_child_step_starts_its_child_by_id_and_completes_with_its_output() -> None:
    p = Run("order-1")
    _, events = p.send(StartWorkflow("parent", 1, '{"order":"A"}'))
    (sched,) = [e for e in events if isinstance(e.payload, ActivityScheduled)]
    assert (sched.payload.activity_type, sched.payload.idempotency_key) == (
        "keel.child:pick",
        "pick-A",
    )
    start = child_start(DECIDER.definition_for, p.state, sched, T0)
    assert (start.workflow_id, start.message_id, start.causation_id) == (
        "pick-A",
        f"{sched.message_id}/child",
        sched.message_id,
    )
    assert start.payload == StartWorkflow("pick", None, '{"order":"A"}', "order-1", "run#1/pick")

    c = Run("pick-A")
    _, child_events = c.send(start.payload)
    assert child_events[0].payload == WorkflowStarted(
        "pick", 1, pick.digest, '{"order":"A"}', 0, "order-1", "run#1/pick"
    )
    assert c.state is not None and c.state.is_terminal
    report = parent_report(c.state, child_events[-1], T0)
    assert report is not None and report.workflow_id == "order-1"
    assert report.payload == CompleteActivity("run#1/pick", 1, '{"picked":1}')
    assert parent_report(c.state, child_events[0], T0) is None  # only the terminal event

    _, events = p.send(report.payload)
    assert events[-1].payload == WorkflowCompleted('{"picked":1}')
    assert check_history(p.history) == [] and check_history(c.history) == []


def test_a_child_that_failed_fails_the_parents_step_with_how_it_ended() -> None:
    failed = WorkflowState(
        "pick-B",
        "r",
        "pick",
        1,
        "d",
        "{}",
        status="failed",
        failure_reason="boom",
        parent_workflow_id="order-2",
        parent_activity_id="run#1/pick",
    )
    end = Envelope("r/9", "pick-B", "r", 9, "WorkflowFailed", T0, WorkflowFailed("boom"))
    report = parent_report(failed, end, T0)
    assert report is not None
    assert report.payload == FailActivity(
        "run#1/pick",
        1,
        "permanent",
        "ChildWorkflowFailed",
        "child workflow 'pick-B' ended failed: boom",
    )
    p = Run("order-2")
    p.send(StartWorkflow("parent", 1, '{"order":"B"}'))
    _, events = p.send(report.payload)
    assert events[-1].payload == WorkflowFailed(
        "step 'pick' (keel.child:pick) failed permanently: ChildWorkflowFailed: "
        "child workflow 'pick-B' ended failed: boom"
    )


def test_a_fan_out_of_children_derives_one_id_per_item() -> None:
    p = Run("order-3")
    _, events = p.send(StartWorkflow("fanned", 1, json.dumps({"order": "C", "lines": [5, 6, 7]})))
    keys = [e.payload.idempotency_key for e in events if isinstance(e.payload, ActivityScheduled)]
    assert keys == ["order-3:run.1.lines.0", "order-3:run.1.lines.1"]
    assert keys[0] == child_workflow_id("order-3", "run#1/lines[0]")


@pytest.mark.parametrize(
    ("name", "cancelled", "stop"),
    [("fanned", 2, CancelWorkflow), ("terminating", 2, TerminateWorkflow), ("abandoning", 0, None)],
)
def test_cancelling_the_parent_stops_its_running_children_as_the_step_says(
    name: str, cancelled: int, stop: type | None
) -> None:
    p = Run("order-4")
    p.send(StartWorkflow(name, 1, json.dumps({"order": "D", "lines": [1, 2]})))
    before, events = p.send(CancelWorkflow("customer withdrew"))
    assert p.state is not None and p.state.is_terminal
    cancels = abandoned_children(DECIDER.definition_for, before, p.state, events[-1], T0)
    assert [(c.workflow_id, type(c.payload)) for c in cancels] == [
        (f"order-4:run.1.lines.{i}", stop) for i in range(cancelled)
    ]
    tag = "terminate" if stop is TerminateWorkflow else "cancel"
    assert [c.message_id for c in cancels] == [
        f"{events[-1].message_id}/{tag}/run#1/lines[{i}]" for i in range(cancelled)
    ]
    if cancels:
        assert cancels[0].payload.reason == ("its parent 'order-4' (cancelled) stopped awaiting it")


def test_a_child_step_of_a_workflow_the_application_lacks_is_refused_at_startup() -> None:
    orphan = WorkflowDefinition(
        "orphan", 1, Order, [State("run", steps=[Step.child("x", "nope")], complete=_lines)]
    )
    with pytest.raises(DefinitionError) as exc:
        Decider([orphan])
    assert str(exc.value) == (
        "workflow 'orphan' v1: step 'x' starts child workflow 'nope', which this "
        "application does not define"
    )


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (
            Step.child("x", "pick", retry=None, start_to_close=5),
            "a child workflow step takes no timeouts (the child's definition governs its run; "
            "docs/child-workflows.md)",
        ),
        (
            Step.child("x", "pick", parent_close="kill"),
            "parent_close must be one of cancel, terminate, abandon; got 'kill'",
        ),
        (
            Step.child("x", "pick", for_each=_lines, workflow_id=lambda ctx: "a"),
            "workflow_id must be a function of the context, and a fan-out's children take "
            "derived ids",
        ),
    ],
)
def test_a_child_step_that_cannot_work_is_refused_when_defined(step: Step, message: str) -> None:
    with pytest.raises(DefinitionError) as exc:
        WorkflowDefinition("bad", 1, Order, [State("run", steps=[step], complete=_lines)])
    assert str(exc.value) == f"workflow 'bad' v1: state 'run': step 'x': {message}"
