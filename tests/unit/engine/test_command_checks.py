"""A command's client-written JSON is checked against the limits before deciding
(orchestrator/engine/command_checks.py): a start's input, a signal's payload, and both
of a signal-with-start."""

from __future__ import annotations

from typing import Any

from orchestrator.application.app import decider_of
from orchestrator.domain.model.limits import MAX_JSON_DEPTH
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    CompleteActivity,
    SignalWithStart,
    SignalWorkflow,
    StartWorkflow,
)
from orchestrator.engine.command_checks import over_limits, reopened
from orchestrator.records.envelopes import command_envelope
from orchestrator.settings import SeededBug

DEEP = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
DEPTH = f"nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects"


def test_every_client_written_value_is_checked_and_named() -> None:
    assert over_limits(StartWorkflow("w", None, DEEP)) == f"the workflow input {DEPTH}"
    assert over_limits(SignalWorkflow("go", DEEP)) == f"signal 'go' payload {DEPTH}"
    assert over_limits(SignalWithStart("w", DEEP, "go", "{}")) == f"the workflow input {DEPTH}"
    assert over_limits(SignalWithStart("w", "{}", "go", DEEP)) == f"signal 'go' payload {DEPTH}"
    assert over_limits(SignalWithStart("w", "{}", "go", "{}")) is None
    assert over_limits(StartWorkflow("w", None, "not json")) is None  # the decider says why


def _one_step_app() -> Any:
    from pydantic import BaseModel

    from orchestrator import KeelApp, Step, WorkflowDefinition

    class In(BaseModel):
        n: int

    app = KeelApp("seeded-bug")
    app.declare_activity("stamp")
    app.workflow(
        WorkflowDefinition.dag(
            "stamped",
            1,
            In,
            [Step("stamp", "stamp"), Step("later", "stamp", after="stamp")],
            output=lambda ctx: ctx.results["later"],
        )
    )
    return app


def test_the_seeded_bug_reopens_a_completed_attempt_so_its_report_is_recorded_again() -> None:
    """``reexecute_on_recovery`` (docs/evaluation.md, "A seeded bug"): off, a repeated report
    writes nothing; on, the same report is recorded as a second completion."""
    decider = decider_of(_one_step_app())
    state, events = decider.handle(
        None, command_envelope("m1", "wf", StartWorkflow("stamped", 1, '{"n": 1}'), 1), 1
    )
    scheduled = next(e.payload for e in events if isinstance(e.payload, ActivityScheduled))
    done = CompleteActivity(scheduled.activity_id, scheduled.attempt, '{"ok": true}')
    state, _ = decider.handle(state, command_envelope("m2", "wf", done, 2), 2)
    again = command_envelope("m3", "wf", done, 3)

    assert reopened(None, state, done) is state
    assert decider.handle(state, again, 3)[1] == []  # the decider drops a repeated report

    seen = reopened(SeededBug.REEXECUTE_ON_RECOVERY, state, done)
    assert seen is not state
    recorded = [e.payload for e in decider.handle(seen, again, 3)[1]]
    assert [type(p) for p in recorded][:1] == [ActivityCompleted]
    assert recorded[0].activity_id == scheduled.activity_id
    other = CompleteActivity(scheduled.activity_id, scheduled.attempt + 1, "{}")
    assert reopened(SeededBug.REEXECUTE_ON_RECOVERY, state, other) is state  # not its attempt
