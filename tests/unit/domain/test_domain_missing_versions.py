"""A process without a run's version parks the run instead of crashing (docs/versioning.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.domain import Decider
from orchestrator.domain.lifecycle.missing_versions import RunParked, is_parked
from orchestrator.domain.model.messages import (
    CompleteActivity,
    Envelope,
    SignalWorkflow,
    StartWorkflow,
    WorkflowCompleted,
    WorkflowNeedsAttention,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import WorkflowStatus
from tests.integration.versions_app import V1, V2

T0 = 1_700_000_000_000


def _cmd(payload: Any, mid: str) -> Envelope[Any]:
    return Envelope(
        message_id=mid,
        workflow_id="wf-1",
        run_id="",
        seq=0,
        type=type(payload).__name__,
        recorded_at=T0,
        payload=payload,
    )


def _v2_run() -> WorkflowState:
    state, _ = Decider([V1, V2]).handle(
        None, _cmd(StartWorkflow("pinned", 2, json.dumps({"order": 7})), "start"), T0
    )
    assert state is not None and state.version == 2
    return state


def test_a_process_without_the_version_parks_the_run_once_and_keeps_its_commands() -> None:
    old = Decider([V1])
    state = _v2_run()
    done = CompleteActivity(next(iter(state.in_flight)), 1, json.dumps({"path": "v2"}))
    with pytest.raises(RunParked) as first:
        old.handle(state, _cmd(done, "done-1"), T0 + 10)
    reason = (
        f"version missing: workflow 'wf-1' runs 'pinned' v2 (digest {V2.digest[:12]}), which "
        "this process does not have; deploy it, then `keel dlq redrive` the run's parked commands"
    )
    assert str(first.value).startswith("workflow 'wf-1' runs 'pinned' v2 (digest ")
    assert str(first.value).endswith(" kept")
    [env] = first.value.events
    assert env.payload == WorkflowNeedsAttention("", reason)
    assert (env.seq, env.causation_id) == (state.seq + 1, "done-1")
    parked = first.value.state
    assert parked.status == WorkflowStatus.NEEDS_ATTENTION
    assert parked.attention_reason == reason and is_parked(parked)

    # later commands are kept too, and record nothing more
    with pytest.raises(RunParked) as again:
        old.handle(parked, _cmd(SignalWorkflow("go", "{}", None), "sig-1"), T0 + 20)
    assert again.value.events == [] and again.value.state is parked

    # a process with v2 decides the redriven command: the run goes on where it was
    done_state, events = Decider([V1, V2]).handle(parked, _cmd(done, "done-1"), T0 + 30)
    assert done_state is not None
    assert isinstance(events[-1].payload, WorkflowCompleted)
    assert json.loads(events[-1].payload.output_json) == {"path": "v2"}
    assert done_state.status == WorkflowStatus.COMPLETED
    assert done_state.attention_reason is None


def test_a_parked_run_that_resumes_is_no_longer_in_attention() -> None:
    old, new = Decider([V1]), Decider([V1, V2])
    state = _v2_run()
    with pytest.raises(RunParked) as parked:
        old.handle(state, _cmd(SignalWorkflow("nope", "{}", None), "sig-1"), T0 + 10)
    # the redriven command is refused by v2 for its own reason, not for attention
    with pytest.raises(Exception) as refused:
        new.handle(parked.value.state, _cmd(SignalWorkflow("nope", "{}", None), "sig-1"), T0)
    assert "needs attention" not in str(refused.value)
    assert not isinstance(refused.value, RunParked)
    # folding the parking keeps the run parked; any later event folds it back to running
    folded = new.fold(parked.value.events, state)
    assert folded is not None and is_parked(folded)
    assert folded.status == WorkflowStatus.NEEDS_ATTENTION
