"""The engine's side of run scope (issue 44, items 2 and 3): a forged engine-only command
read from the commands topic is refused and recorded, a timer entry of an earlier arming
never fires early, and a child id naming another run fails the parent's step at once."""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator import KeelApp
from orchestrator.domain.authoring.definitions import State, Step, WorkflowDefinition
from orchestrator.domain.history.invariants import check_histories
from orchestrator.domain.lifecycle.run_scope import ENGINE_ONLY_COMMANDS
from orchestrator.domain.model.messages import (
    ActivityFailed,
    CommandRefused,
    FireTimer,
    TimerFired,
    TimerScheduled,
    WorkflowFailed,
)
from tests.unit.memory_rig import MemoryRig


class Count(BaseModel):
    n: int = 0


def _app() -> KeelApp:
    app = KeelApp("run-scope")
    app.workflow(WorkflowDefinition("kid", 1, Count, [State("run", complete=lambda ctx: {})]))
    for name, child_id in (("named", "kid-fixed"), ("selfish", "p-self")):
        step = Step.child("kid", "kid", workflow_id=lambda ctx, c=child_id: c)
        app.workflow(
            WorkflowDefinition(
                name, 1, Count, [State("run", steps=[step], complete=lambda ctx: {})]
            )
        )
    return app


def test_fire_timer_is_the_only_engine_only_command() -> None:
    assert frozenset({FireTimer}) == ENGINE_ONLY_COMMANDS


def test_a_forged_fire_timer_from_the_commands_topic_is_refused_and_recorded(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("review", "document_review", {"document": "a"})
    rig.run()
    armed = [e.payload for e in rig.events("review") if isinstance(e.payload, TimerScheduled)]
    assert armed, "document_review waits with a timeout"
    for timer in armed:
        rig.send("review", FireTimer(timer.timer_id), f"forged/{timer.timer_id}")
    rig.run()
    events = rig.events("review")
    assert not [e for e in events if isinstance(e.payload, TimerFired)]
    refused = [e for e in events if isinstance(e.payload, CommandRefused)]
    assert [(e.causation_id, e.payload.command, e.payload.what) for e in refused] == [
        (f"forged/{t.timer_id}", "FireTimer", f"timer '{t.timer_id}'") for t in armed
    ]
    assert {e.payload.reason for e in refused} == {
        "FireTimer is issued only by the engine itself; one read from the commands topic is "
        "refused, never applied"
    }
    assert rig.letters() == []
    assert check_histories(events) == []


def test_a_timer_entry_of_an_earlier_arming_does_not_fire_early(tmp_path):
    """The heap keeps one entry per (workflow, timer id): an entry at another arming's
    time is re-armed at the run's ``fire_at``, not fired (issue 44 #2)."""
    rig = MemoryRig(tmp_path)
    rig.start("review", "document_review", {"document": "a"})
    rig.run()
    [timer] = [e.payload for e in rig.events("review") if isinstance(e.payload, TimerScheduled)]
    loop = rig.orch.ctx
    p = next(p for p, ps in loop.partitions.items() if ps.get("review") is not None)
    outs = rig.orch.loop._fire_timer(p, "review", timer.timer_id, {}, timer.fire_at - 1)
    assert outs == []
    assert loop.timers.next_due_in_ms(timer.fire_at - 1) == 1  # re-armed at its own time


def _child_failed(rig: MemoryRig, wf: str) -> tuple[ActivityFailed, WorkflowFailed]:
    events = rig.events(wf)
    [failed] = [e.payload for e in events if isinstance(e.payload, ActivityFailed)]
    assert isinstance(events[-1].payload, WorkflowFailed)
    return failed, events[-1].payload


def test_a_child_id_naming_a_finished_run_fails_the_parents_step(tmp_path):
    rig = MemoryRig(tmp_path, app=_app())
    rig.start("kid-fixed", "kid", {})
    rig.run()
    rig.start("p-1", "named", {})
    rig.run()
    failed, ended = _child_failed(rig, "p-1")
    assert (failed.activity_id, failed.failure_class, failed.error_type) == (
        "run#1/kid",
        "permanent",
        "ChildWorkflowIdInUse",
    )
    assert failed.message == (
        "child workflow id 'kid-fixed' of activity 'run#1/kid' names a run of workflow 'kid' "
        "v1 (completed), not a child of this step; the child start is refused"
    )
    assert failed.message in ended.reason
    assert len(rig.events("kid-fixed")) == 3  # the finished run is left as it was
    assert rig.letters() == []
    assert check_histories(rig.events()) == []


def test_a_child_id_naming_the_parent_itself_fails_the_parents_step(tmp_path):
    rig = MemoryRig(tmp_path, app=_app())
    rig.start("p-self", "selfish", {})
    rig.run()
    failed, _ = _child_failed(rig, "p-self")
    assert failed.error_type == "ChildWorkflowIdInUse"
    assert "names the parent itself" in failed.message
    assert check_histories(rig.events()) == []  # the step was told: no hang to flag
