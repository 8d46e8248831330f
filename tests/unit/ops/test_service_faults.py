"""Faults injected as adapter hooks (ops/faults/service_faults.py,
orchestrator/io/adapter_hooks.py): the seeded bug ``reexecute_on_recovery`` in the
decider and the worker's consumer, and how ``KEEL_ADAPTER_HOOKS`` is loaded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from handlers.worker import Worker
from ops.faults.service_faults import (
    SeededBug,
    hooks_of,
    pause_after_ack,
    reexecute_on_recovery,
    reopened,
)
from orchestrator.application.app import AppLoadError, decider_of
from orchestrator.cli.app_spec import adapter_hooks
from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    CompleteActivity,
    StartWorkflow,
)
from orchestrator.io.adapter_hooks import NO_HOOKS
from orchestrator.io.memory import MemoryOutcomeSink
from orchestrator.records.envelopes import command_envelope
from tests.unit.handlers.test_worker_loop import Rig, app


def _one_step_app() -> Any:
    from pydantic import BaseModel

    from orchestrator import KeelApp, Step, WorkflowDefinition

    class In(BaseModel):
        n: int

    one = KeelApp("seeded-bug")
    one.declare_activity("stamp")
    one.workflow(
        WorkflowDefinition.dag(
            "stamped",
            1,
            In,
            [Step("stamp", "stamp"), Step("later", "stamp", after="stamp")],
            output=lambda ctx: ctx.results["later"],
        )
    )
    return one


def test_the_seeded_bug_reopens_a_completed_attempt_so_its_report_is_recorded_again() -> None:
    """Off, a repeated report writes nothing; through the hooked decider, the same report
    is recorded as a second completion."""
    decider = decider_of(_one_step_app())
    state, events = decider.handle(
        None, command_envelope("m1", "wf", StartWorkflow("stamped", 1, '{"n": 1}'), 1), 1
    )
    scheduled = next(e.payload for e in events if isinstance(e.payload, ActivityScheduled))
    done = CompleteActivity(scheduled.activity_id, scheduled.attempt, '{"ok": true}')
    state, _ = decider.handle(state, command_envelope("m2", "wf", done, 2), 2)
    again = command_envelope("m3", "wf", done, 3)

    assert NO_HOOKS.decider(decider) is decider
    assert decider.handle(state, again, 3)[1] == []  # the decider drops a repeated report

    buggy = reexecute_on_recovery.decider(decider)
    assert buggy.definitions is decider.definitions  # the rest is the real decider's
    recorded = [e.payload for e in buggy.handle(state, again, 3)[1]]
    assert [type(p) for p in recorded][:1] == [ActivityCompleted]
    assert recorded[0].activity_id == scheduled.activity_id
    other = CompleteActivity(scheduled.activity_id, scheduled.attempt + 1, "{}")
    assert reopened(state, other) is state  # not its attempt


def test_a_restarted_worker_with_the_seeded_bug_runs_committed_tasks_again(tmp_path):
    rig = Rig(tmp_path)
    rig.task("wf-1", "add_one", {"n": 1})
    assert rig.worker.step()
    assert [e.payload for e in rig.reports("wf-1")] == [
        CompleteActivity("run#1/step", 1, '{"n": 2}')
    ]
    rig.task("wf-1", "add_one", {"n": 10})
    assert rig.worker.step()  # no hooks: the new task only
    assert len(rig.reports("wf-1")) == 2

    restarted = Worker(
        rig.settings,
        app,
        adapters=(rig.new_intake(), MemoryOutcomeSink(rig.broker)),
        effects=rig.effects,
        hooks=reexecute_on_recovery,
    )
    restarted.subscribe()
    rig.task("wf-1", "add_one", {"n": 100})
    assert restarted.step()  # its first batch: back to the start, nothing run yet
    assert len(rig.reports("wf-1")) == 2
    for _ in range(20):
        if len(rig.reports("wf-1")) >= 5:
            break
        assert restarted.step()
    results = [e.payload.result_json for e in rig.reports("wf-1")]
    assert results == ['{"n": 2}', '{"n": 11}', '{"n": 2}', '{"n": 11}', '{"n": 101}']


def test_keel_adapter_hooks_names_the_hooks_a_service_loads(tmp_path, monkeypatch) -> None:
    def settings(spec: str) -> Settings:
        return Settings(home=tmp_path, adapter_hooks=spec)

    assert adapter_hooks(settings("")) is NO_HOOKS
    assert adapter_hooks(settings(hooks_of(SeededBug.REEXECUTE_ON_RECOVERY))) is (
        reexecute_on_recovery
    )
    monkeypatch.setenv("KEEL_FAULT_PAUSE_S", "2.5")
    made = adapter_hooks(settings("ops.faults.service_faults:pause_after_ack"))  # a factory
    assert repr(made) == "pause_after_ack(2.5s)"
    with pytest.raises(AppLoadError) as exc:
        adapter_hooks(settings("ops.faults.service_faults:PAUSE_VARIABLE"))
    assert str(exc.value) == (
        "KEEL_ADAPTER_HOOKS 'ops.faults.service_faults:PAUSE_VARIABLE' is a str, not AdapterHooks"
    )
    with pytest.raises(AppLoadError) as exc:
        adapter_hooks(settings("ops.faults.service_faults:nothing"))
    assert str(exc.value) == "module 'ops.faults.service_faults' has no attribute 'nothing'"


def test_the_pause_after_ack_waits_after_the_inner_send(monkeypatch) -> None:
    monkeypatch.setenv("KEEL_FAULT_PAUSE_S", "0.01")
    calls: list[str] = []

    class Producer:
        closed = False

        async def send(self, topic: str, key: bytes, value: bytes, headers: Any) -> None:
            calls.append(topic)

    wrapped = pause_after_ack().command_producer(Producer())
    asyncio.run(wrapped.send("t", b"k", b"v", []))
    assert calls == ["t"] and wrapped.closed is False
    monkeypatch.setenv("KEEL_FAULT_PAUSE_S", "0")
    with pytest.raises(ValueError, match=r"KEEL_FAULT_PAUSE_S must be in \(0, 600\], got 0"):
        pause_after_ack()
