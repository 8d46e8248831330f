"""A rebuild the application cannot finish is refused before it touches the read model."""

from __future__ import annotations

import pytest

from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.messages import Envelope, WorkflowStarted
from orchestrator.domain.model.migration_messages import WorkflowMigrated
from orchestrator.projector.rebuild_guard import refuse_undefined, undefined_workflows


def _event(workflow_id: str, payload: object) -> Envelope:
    return Envelope("m", workflow_id, "r", 1, type(payload).__name__, 0, payload)


def _started(workflow_id: str, name: str, version: int = 1) -> Envelope:
    return _event(workflow_id, WorkflowStarted(name, version, "d", "{}"))


def _migrated(workflow_id: str, to: int) -> Envelope:
    migrated = WorkflowMigrated(1, to, "a", "b", "s", "s", "m", "{}", "ops", "test")
    return _event(workflow_id, migrated)


DEFINED = {("order", 1): object()}


def test_runs_of_undefined_workflows_are_counted_by_name_and_version() -> None:
    events = [
        _started("o-1", "order"),
        _started("s-1", "shipping"),
        _started("s-2", "shipping"),
        _started("o-2", "order"),
        _migrated("o-2", 2),
    ]
    assert undefined_workflows(events, DEFINED) == {("shipping", 1): 2, ("order", 2): 1}


def test_the_refusal_names_the_workflows_and_says_nothing_changed() -> None:
    with pytest.raises(InvalidInputError) as caught:
        refuse_undefined([_started("s-1", "shipping")], DEFINED, "shop:app")
    assert "'shipping' v1 (1 run(s)), which shop:app does not define" in str(caught.value)
    assert "nothing was changed" in str(caught.value)


def test_events_of_defined_workflows_pass() -> None:
    refuse_undefined([_started("o-1", "order")], DEFINED, "shop:app")
