"""Local activities on the in-memory adapter: the recording rules.

A local step runs in the orchestrator right after the decision that schedules it and
its report is decided in the same transaction: no task record, the same events as a
remote run, at-least-once execution and exactly-once recording across aborted batches.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    ActivityTimedOut,
    WorkflowCompleted,
    WorkflowFailed,
)
from orchestrator.engine.local_activities import LocalActivities
from orchestrator.io.ports import TxnAbortable
from orchestrator.records.clock import ManualClock
from tests.integration import local_app
from tests.unit.memory_rig import MemoryRig


def _types(events) -> list[str]:
    return [e.type for e in events]


def _sound(events) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    ids = [e.message_id for e in events]
    assert len(set(ids)) == len(ids)


def test_a_chain_of_local_steps_is_one_transaction_and_writes_no_task(tmp_path):
    rig = MemoryRig(tmp_path, app=local_app.app)
    rig.start("wf-1", "three_step_local", {"n": 2})
    rig.orch.step()
    events = rig.events("wf-1")
    _sound(events)
    assert isinstance(events[-1].payload, WorkflowCompleted)
    assert json.loads(events[-1].payload.output_json) == {"n": 36}
    assert rig.broker.records(rig.topics.activity_tasks) == []
    assert rig.orch.stats.transactions == 1
    assert rig.orch.stats.local_activities == 3


def test_local_and_remote_runs_record_the_same_events(tmp_path):
    local = MemoryRig(tmp_path / "l", app=local_app.app)
    local.start("wf-1", "three_step_local", {"n": 3})
    local.run()
    remote = MemoryRig(tmp_path / "r", app=local_app.app)
    remote.start("wf-1", "three_step", {"n": 3})
    remote.run()
    got, want = local.events("wf-1"), remote.events("wf-1")
    assert _types(got) == _types(want)
    assert [e.payload for e in got[2:]] == [e.payload for e in want[2:]]
    # the report is recorded as a worker's report would be: caused by the task id
    completed = [e for e in got if isinstance(e.payload, ActivityCompleted)]
    scheduled = [e for e in got if isinstance(e.payload, ActivityScheduled)]
    assert [c.causation_id for c in completed] == [
        f"{s.message_id}/task/report/1" for s in scheduled
    ]


def test_a_mixed_workflow_sends_only_its_remote_step_to_the_workers(tmp_path):
    rig = MemoryRig(tmp_path, app=local_app.app)
    rig.start("wf-1", "mixed_local_remote", {"n": 1})
    rig.run()
    events = rig.events("wf-1")
    _sound(events)
    assert json.loads(events[-1].payload.output_json) == {"n": 16}
    tasks = [rig_decode(r) for r in rig.broker.records(rig.topics.activity_tasks)]
    assert [t.payload.activity_type for t in tasks] == ["double"]


def rig_decode(rec: Any) -> Any:
    from tests.unit.memory_rig import codec

    return codec.decode(rec.value)


def test_an_aborted_batch_runs_the_local_step_again_and_records_it_once(tmp_path):
    local_app.CALLS.clear()
    rig = MemoryRig(tmp_path, app=local_app.app)
    rig.broker.inject("commit", TxnAbortable("injected: coordinator moved"))
    rig.start("wf-1", "mixed_local_remote", {"n": 1})
    rig.orch.step()  # ran the local step, then the commit aborted: nothing recorded
    assert rig.events("wf-1") == []
    assert local_app.CALLS["count_add_one"] == 1
    rig.run()
    assert local_app.CALLS["count_add_one"] == 2  # at least once
    events = rig.events("wf-1")
    _sound(events)
    done = [e for e in events if isinstance(e.payload, ActivityCompleted)]
    assert [e.payload.activity_id.split("/")[-1] for e in done] == ["one", "two", "three"]


class FakeEffects:
    """The effect store's contract, in memory: one record per idempotency key."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.calls = 0

    def begin(self, key: str, attempt: int, token: str | None = None) -> Any:
        from handlers.effects import Claim, ClaimOutcome

        rec = self.records.get(key)
        if rec is not None and rec["state"] == "committed":
            return Claim(ClaimOutcome.COMMITTED, result_json=rec["result"])
        self.records[key] = {"state": "pending", "attempt": attempt}
        return Claim(ClaimOutcome.RUN)

    def commit(self, key: str, result_json: str) -> None:
        self.records[key] = {"state": "committed", "result": result_json}

    def release(self, key: str, attempt: int | None = None) -> bool:
        self.records.pop(key, None)
        return True

    def refuse(self, key: str, *args: Any) -> None:
        self.records[key] = {"state": "refused"}


def test_a_side_effect_rerun_after_an_abort_returns_the_recorded_result(tmp_path):
    from handlers.sdk.markers import side_effect

    app = local_app.app
    effects_made: list[str] = []

    @side_effect
    def write(inp: dict[str, Any]) -> dict[str, Any]:
        from handlers.sdk.activity_context import activity

        effects_made.append(activity().idempotency_key)
        return {"n": len(effects_made)}

    app.handlers["count_add_one"] = type(app.handlers["count_add_one"])(
        **{**app.handlers["count_add_one"].__dict__, "fn": write}
    )
    try:
        rig = MemoryRig(tmp_path, app=app)
        store = FakeEffects()
        runner = rig.orch.ctx.local
        assert isinstance(runner, LocalActivities)
        runner._effects = store
        rig.broker.inject("commit", TxnAbortable("injected"))
        rig.start("wf-1", "mixed_local_remote", {"n": 1})
        rig.orch.step()
        rig.run()
    finally:
        app.handlers["count_add_one"] = type(app.handlers["count_add_one"])(
            **{**app.handlers["count_add_one"].__dict__, "fn": local_app.count_add_one}
        )
    assert effects_made == ["wf-1/count_add_one/1"], "the effect happened once, keyed by K"
    events = rig.events("wf-1")
    first = next(e for e in events if isinstance(e.payload, ActivityCompleted))
    assert json.loads(first.payload.result_json) == {"n": 1}


def test_a_local_step_past_its_timeout_is_failed_by_its_timer(tmp_path):
    local_app.CALLS.clear()
    clock = ManualClock()
    rig = MemoryRig(tmp_path, app=local_app.app, clock=clock)
    rig.start("wf-1", "slow_local", {"seconds": 5})
    rig.orch.step()  # runs it, cancels it at the 300 ms bound, commits the schedule
    events = rig.events("wf-1")
    assert isinstance(events[-1].payload, ActivityScheduled) or any(
        e.type == "TimerScheduled" for e in events
    )
    assert not any(isinstance(e.payload, ActivityFailed) for e in events)
    assert rig.orch.stats.local_overruns == 1
    assert local_app.CALLS.get("local_sleep_done", 0) == 0, "cancelled, not left running"
    # the engine's clock, not the wall clock, decides when the timer is due: no sleeping
    clock.advance(0.299)
    rig.orch.step()
    assert not any(isinstance(e.payload, WorkflowFailed) for e in rig.events("wf-1"))
    clock.advance(0.001)
    rig.orch.step()
    events = rig.events("wf-1")
    _sound(events)
    timed_out = [e.payload for e in events if isinstance(e.payload, ActivityTimedOut)]
    assert [t.timeout for t in timed_out] == ["start_to_close"]
    assert "StartToCloseTimeout" in events[-1].payload.reason


def test_a_local_step_without_a_timer_is_failed_at_its_bound(tmp_path):
    rig = MemoryRig(tmp_path, app=local_app.app, local_bound_ms=100)
    rig.start("wf-1", "slow_local_untimed", {"seconds": 5})
    rig.orch.step()
    events = rig.events("wf-1")
    _sound(events)
    failed = [e.payload for e in events if isinstance(e.payload, ActivityFailed)]
    assert [(f.failure_class, f.error_type) for f in failed] == [
        ("transient", "StartToCloseTimeout")
    ]
    assert "in-process bound of 100 ms" in failed[0].message
    assert isinstance(events[-1].payload, WorkflowFailed)


def test_without_local_activities_every_step_goes_to_the_workers(tmp_path):
    rig = MemoryRig(tmp_path, app=local_app.app, local_activities=False)
    rig.start("wf-1", "three_step_local", {"n": 2})
    rig.run()
    assert json.loads(rig.events("wf-1")[-1].payload.output_json) == {"n": 36}
    assert len(rig.broker.records(rig.topics.activity_tasks)) == 3


def test_local_flag_changes_no_existing_digest():
    from orchestrator.domain.authoring.definitions import Step

    assert "local" not in Step("a", "b").describe()
    assert Step("a", "b", local=True).describe()["local"] is True
