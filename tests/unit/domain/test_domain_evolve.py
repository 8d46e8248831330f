"""Evolve is linear in the number of events and never changes a state it was given.

A decision and a ``fold`` copy the state once and fold every event into that scratch
copy; ``evolve(state, event)`` copies per event. Both must build the same state.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from orchestrator.domain import Decider, Step, WorkflowDefinition, WorkflowState
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    StartWorkflow,
    StateEntered,
    WorkflowCompleted,
    WorkflowStarted,
)
from tests.unit.domain.test_domain_properties import DECIDER, WIDS, World

T0 = 1_700_000_000_000
STEPS = 20_000


class Empty(BaseModel):
    pass


def cmd(payload: Any, mid: str, at: int = T0) -> Envelope[Any]:
    return Envelope(mid, "big", "", 0, type(payload).__name__, at, payload)


def test_a_20000_step_dag_starts_and_runs() -> None:
    wide = WorkflowDefinition.dag(
        "wide",
        1,
        Empty,
        [Step(f"s{i}", "work") for i in range(STEPS)],
        output=lambda ctx: {"done": len(ctx.results)},
    )
    decider = Decider([wide])
    state, envs = decider.handle(None, cmd(StartWorkflow("wide", 1, "{}"), "start"), T0)
    assert state is not None and len(envs) == STEPS + 2
    assert isinstance(envs[0].payload, WorkflowStarted)
    assert envs[1].payload == StateEntered("run", 1)
    scheduled = [e.payload for e in envs[2:]]
    assert all(isinstance(p, ActivityScheduled) for p in scheduled)
    assert [p.activity_id for p in scheduled[:2]] == ["run#1/s0", "run#1/s1"]
    assert scheduled[-1].logical_attempt == STEPS
    assert len(state.in_flight) == STEPS and len(state.steps_remaining) == STEPS
    assert decider.fold(envs) == state

    # the start state is shared from here on: deciding from it twice changes nothing in it
    before = state.to_json()
    one = decider.decide(state, cmd(CompleteActivity("run#1/s0", 1, "{}"), "c0"))
    assert one == [ActivityCompleted("run#1/s0", 1, "{}")]
    assert state.to_json() == before
    history = list(envs)
    for i in range(3):
        state, more = decider.handle(
            state, cmd(CompleteActivity(f"run#1/s{i}", 1, "{}"), f"c{i}"), T0 + 1
        )
        assert [e.payload for e in more] == [ActivityCompleted(f"run#1/s{i}", 1, "{}")]
        history.extend(more)
    assert state is not None and len(state.steps_remaining) == STEPS - 3
    assert decider.fold(history) == state


def test_a_wide_dag_runs_to_its_output() -> None:
    wide = WorkflowDefinition.dag(
        "wide",
        1,
        Empty,
        [Step(f"s{i}", "work") for i in range(300)],
        output=lambda ctx: {"done": len(ctx.results)},
    )
    decider = Decider([wide])
    state, history = decider.handle(None, cmd(StartWorkflow("wide", 1, "{}"), "start"), T0)
    for i in reversed(range(300)):
        assert state is not None
        state, envs = decider.handle(
            state, cmd(CompleteActivity(f"run#1/s{i}", 1, "{}"), f"c{i}"), T0 + 1
        )
        history.extend(envs)
    assert state is not None and state.status == "completed"
    assert history[-1].payload == WorkflowCompleted('{"done":300}')
    assert decider.fold(history) == state


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_fold_with_one_copy_equals_event_by_event_evolve(data: st.DataObject) -> None:
    world = World(focus=data.draw(st.booleans(), label="focus"))
    for _ in range(data.draw(st.integers(1, 60), label="length")):
        world.step(data)
    for wid in WIDS:
        history = [e for r in world.records[wid] if r.envs for e in r.envs]
        if not history:
            continue
        stepwise: WorkflowState | None = None
        for env in history:
            frozen = None if stepwise is None else (stepwise, stepwise.to_json())
            stepwise = DECIDER.evolve(stepwise, env)
            if frozen is not None:  # the state given to evolve is left as it was
                assert frozen[0].to_json() == frozen[1]
        folded = DECIDER.fold(history)
        assert stepwise == folded == world.states[wid]
        assert stepwise is not None and folded is not None
        assert stepwise.to_json() == folded.to_json()
        assert (
            stepwise.timer_index
            == folded.timer_index
            == {t.purpose: tid for tid, t in folded.timers.items()}
        )
