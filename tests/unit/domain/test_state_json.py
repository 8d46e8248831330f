"""``WorkflowState.to_json`` (activities' parts cached) is exactly the sorted, compact
JSON of ``to_dict``, for every state of every run of the recorded corpus, and stays so
when an activity is replaced (the cache is by identity, never stale)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from orchestrator.application.app import KeelApp, decider_of
from orchestrator.client.history_io import read_history_dir
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import ActivityStatus
from orchestrator.examples import app as examples
from orchestrator.schedules.definition import install_definition

#: The corpus holds the examples' runs and a run of the built-in keel.schedule.
CORPUS_APP = install_definition(KeelApp("corpus").include(examples))

CORPUS = Path(__file__).resolve().parents[2] / "histories"


def _reference(state: WorkflowState) -> str:
    return json.dumps(state.to_dict(), sort_keys=True, separators=(",", ":"))


def test_to_json_equals_the_sorted_dict_for_every_corpus_state() -> None:
    decider = decider_of(CORPUS_APP)
    states: dict[str, WorkflowState | None] = {}
    checked = 0
    for env in read_history_dir(CORPUS):
        state = decider.evolve(states.get(env.workflow_id), env)
        states[env.workflow_id] = state
        text = state.to_json()
        assert text == _reference(state), (env.workflow_id, env.seq)
        assert WorkflowState.from_json(text).to_json() == text
        checked += 1
    assert checked > 200
    assert any(s is not None and s.human_tasks for s in states.values())
    assert any(s is not None and s.compensation is not None for s in states.values())


def test_a_replaced_activity_is_encoded_anew() -> None:
    decider = decider_of(CORPUS_APP)
    state = None
    for env in read_history_dir(CORPUS):
        state = decider.evolve(
            state if state and state.workflow_id == env.workflow_id else None, env
        )
        if state.activities:
            break
    assert state is not None and state.activities
    before = state.to_json()
    aid, act = next(iter(state.activities.items()))
    changed = state.clone()
    changed.mut_activities()[aid] = dataclasses.replace(
        act, status=ActivityStatus.FAILED, error_message="boom é"
    )
    assert changed.to_json() == _reference(changed) != before
    assert state.to_json() == before
