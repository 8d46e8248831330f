"""The built-in ``keel.schedule`` through the pure decider: ticks recorded, controls applied
once, the timer until the next fire time, continue-as-new carrying the state and a control
that came during the last tick, delete ending the run (docs/schedules.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.application.app import KeelApp
from orchestrator.client.schedule_client import build_spec
from orchestrator.client.schedule_ticks import install_schedules
from orchestrator.domain import Decider, WorkflowState
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    FireTimer,
    SignalWorkflow,
    StartWorkflow,
    TimerScheduled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
)
from orchestrator.schedules import definition as schedule_definition
from orchestrator.schedules.definition import SCHEDULE_WORKFLOW, TICK_ACTIVITY, install_definition
from orchestrator.schedules.planning import TickInput, TickOutcome, run_tick

T0 = 1_800_000_000_000  # an even second


class Harness:
    """One schedule run decided in memory; its tick activity run by ``run_tick``."""

    def __init__(self) -> None:
        app = install_definition(KeelApp("t"))
        self.d = Decider(list(app.definitions.values()))
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.started: list[str] = []
        self.n = 0
        self.clock = T0

    def send(self, payload: Any) -> list[Any]:
        self.n += 1
        env: Envelope[Any] = Envelope(
            f"cmd-{self.n}", "schedule:s", "", 0, type(payload).__name__, self.clock, payload
        )
        self.state, events = self.d.handle(self.state, env, now_ms=self.clock)
        self.history.extend(events)
        return [e.payload for e in events]

    def start(self, **spec: Any) -> list[Any]:
        body = {"spec": build_spec("s", "w", every="2s", **spec).model_dump(mode="json")}
        return self.send(StartWorkflow(SCHEDULE_WORKFLOW, None, json.dumps(body)))

    def work(self, events: list[Any]) -> list[Any]:
        """Run the tick each ``ActivityScheduled`` asks for, and report it."""
        out = list(events)
        for e in events:
            if isinstance(e, ActivityScheduled):
                assert e.activity_type == TICK_ACTIVITY
                inp = TickInput.model_validate_json(e.input_json)
                result = run_tick(inp, self.clock, lambda wf: True, self._start)
                out += self.work(
                    self.send(CompleteActivity(e.activity_id, e.attempt, result.model_dump_json()))
                )
        return out

    def _start(self, tick_ms: int, run_id: str) -> tuple[TickOutcome, str | None]:
        self.started.append(run_id)
        return TickOutcome.STARTED, None

    def timer(self) -> TimerScheduled:
        assert self.state is not None
        (timer_id,) = self.state.timers
        return next(
            e.payload
            for e in reversed(self.history)
            if isinstance(e.payload, TimerScheduled) and e.payload.timer_id == timer_id
        )

    def fire(self) -> list[Any]:
        t = self.timer()
        self.clock = max(self.clock, t.fire_at)
        return self.work(self.send(FireTimer(t.timer_id)))


def test_a_schedule_ticks_on_its_timer_and_records_each_tick() -> None:
    h = Harness()
    h.clock = T0 + 500
    h.work(h.start(overlap="allow_all"))
    assert h.timer().fire_at == T0 + 2000  # the next fire time
    for _ in range(3):
        h.fire()
    assert h.started == [f"s:{_iso(T0 + 2000 * i)}" for i in (1, 2, 3)]
    assert check_history(h.history) == []


def test_pause_and_delete_are_signals_applied_once() -> None:
    h = Harness()
    h.work(h.start())
    h.work(h.send(SignalWorkflow("control", json.dumps({"op": "pause"}))))
    assert h.state is not None and h.state.current_state == "sleep"
    h.clock += 10_000
    h.fire()
    assert h.started == []
    events = h.work(h.send(SignalWorkflow("control", json.dumps({"op": "delete"}))))
    assert isinstance(events[-1], WorkflowCompleted)
    assert json.loads(events[-1].output_json) == {"deleted": True, "started": 0, "skipped": 0}
    assert check_history(h.history) == []


def test_every_rollover_ticks_the_run_continues_as_new_with_its_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule_definition, "ROLLOVER_TICKS", 3)
    h = Harness()
    h.work(h.start(overlap="allow_all"))
    h.fire()
    events = h.fire()  # the third tick of the run: it continues as new
    assert any(isinstance(e, WorkflowContinuedAsNew) for e in events)
    for _ in range(2):
        h.fire()
    assert len(h.started) == 4 and len(set(h.started)) == 4
    assert check_history(h.history) == []


def test_every_service_app_knows_the_schedule_and_runs_its_ticks() -> None:
    app = install_schedules(KeelApp("any"))
    assert (SCHEDULE_WORKFLOW, 1) in app.definitions
    assert TICK_ACTIVITY in app.handlers
    app.check()
    assert install_schedules(app) is app  # twice is once


def _iso(ms: int) -> str:
    from orchestrator.schedules.spec import tick_iso

    return tick_iso(ms)


def test_a_control_that_comes_during_the_last_tick_of_a_run_is_applied_by_the_next_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule_definition, "ROLLOVER_TICKS", 2)
    h = Harness()
    h.work(h.start(overlap="allow_all"))
    t = h.timer()
    h.clock = t.fire_at
    (scheduled,) = [e for e in h.send(FireTimer(t.timer_id)) if isinstance(e, ActivityScheduled)]
    h.send(SignalWorkflow("control", json.dumps({"op": "pause"})))  # while the tick runs
    inp = TickInput.model_validate_json(scheduled.input_json)
    assert inp.controls == []  # this tick never sees it
    result = run_tick(inp, h.clock, lambda wf: True, h._start)
    events = h.work(
        h.send(CompleteActivity(scheduled.activity_id, scheduled.attempt, result.model_dump_json()))
    )
    assert any(isinstance(e, WorkflowContinuedAsNew) for e in events)
    assert h.state is not None and h.state.current_state == "sleep"
    assert json.loads(h.state.step_results["tick"])["carry"]["paused"] is True
    assert len(h.started) == 1
    assert check_history(h.history) == []
