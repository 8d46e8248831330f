"""Nothing of one run is applied to another, continue-as-new included (issue 44, items 1-3;
``orchestrator/domain/lifecycle/run_scope.py``, docs/workflows.md "Runs and their ids").

Run 1 of ``looper`` keeps the ids it always had; run 2 (begun by the continue-as-new at
seq ``BASE``) carries ``@BASE`` in every activity, timer and derived child id, and a
report, a timer fire or a child reply of run 1 is refused there, never applied.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import Decider, WorkflowState
from orchestrator.domain.authoring.definitions import (
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.keys import child_workflow_id, visit_tag
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CommandRefused,
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    SignalWorkflow,
    StartWorkflow,
    TimerScheduled,
    WorkflowContinuedAsNew,
)

T0 = 1_700_000_000_000
WF = "loop-1"


class Count(BaseModel):
    n: int = 0


kid = WorkflowDefinition("kid", 1, Count, [State("run", complete=lambda ctx: {"ok": 1})])
other = WorkflowDefinition(
    "other", 1, Count, [State("run", wait=SignalWait("never"), complete=lambda ctx: {})]
)
looper = WorkflowDefinition(
    "looper",
    1,
    Count,
    [
        State(
            "run",
            steps=[Step("work", "work"), Step.child("kid", "kid")],
            wait=SignalWait("go", timeout=30),
            transitions=[Transition("done", when=lambda ctx: ctx.input.n >= 1)],
            continue_as_new=lambda ctx: {"n": ctx.input.n + 1},
        ),
        State("done", complete=lambda ctx: {"n": ctx.input.n}),
    ],
)
named = WorkflowDefinition(
    "named",
    1,
    Count,
    [
        State(
            "run",
            steps=[Step.child("kid", "kid", workflow_id=lambda ctx: "kid-fixed")],
            complete=lambda ctx: ctx.results["kid"],
        )
    ],
)
DECIDER = Decider([kid, other, looper, named])


class Run:
    """One workflow's state and history, fed commands at chosen clocks."""

    def __init__(self, wf: str = WF) -> None:
        self.wf = wf
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0

    def env(self, payload: Any, at: int, run_id: str = "") -> Envelope[Any]:
        self.n += 1
        return Envelope(f"cmd-{self.n}", self.wf, run_id, 0, type(payload).__name__, at, payload)

    def send(self, payload: Any, at: int, run_id: str = "") -> list[Any]:
        self.state, events = DECIDER.handle(self.state, self.env(payload, at, run_id), at)
        self.history.extend(events)
        return [e.payload for e in events]

    def refused(self, payload: Any, at: int, run_id: str = "") -> str:
        """The refusal's reason, after checking the run records it as ``CommandRefused``."""
        cmd = self.env(payload, at, run_id)
        assert self.state is not None
        with pytest.raises(CommandRejected) as exc:
            DECIDER.handle(self.state, cmd, at)
        _, events = DECIDER.refuse(self.state, cmd, at, str(exc.value))
        assert [type(e.payload) for e in events] == [CommandRefused]
        assert events[0].payload.command_id == cmd.message_id
        return str(exc.value)


def _scheduled(payloads: list[Any]) -> dict[str, ActivityScheduled]:
    return {p.step: p for p in payloads if isinstance(p, ActivityScheduled)}


def _two_runs() -> tuple[Run, dict[str, ActivityScheduled], dict[str, ActivityScheduled], str]:
    """Run 1 dispatches, signals its wait at 12 s and continues as new; run 2 dispatches."""
    r = Run()
    first = _scheduled(r.send(StartWorkflow("looper", 1, '{"n": 0}'), T0))
    run1 = r.state.run_id  # type: ignore[union-attr]
    r.send(CompleteActivity(first["work"].activity_id, 1, "{}"), T0 + 1)
    r.send(CompleteActivity(first["kid"].activity_id, 1, "{}"), T0 + 2)
    second = _scheduled(r.send(SignalWorkflow("go", "{}"), T0 + 12_000))
    return r, first, second, run1


def test_the_first_run_keeps_its_ids_and_a_continued_run_scopes_every_id() -> None:
    r, first, second, _run1 = _two_runs()
    [continued] = [e for e in r.history if isinstance(e.payload, WorkflowContinuedAsNew)]
    base = continued.seq
    assert first["work"].activity_id == "run#1/work"  # as before issue 44: the corpus holds
    assert first["kid"].idempotency_key == f"{WF}:run.1.kid"
    assert second["work"].activity_id == f"run#1@{base}/work"
    assert second["kid"].idempotency_key == f"{WF}:run.1@{base}.kid"
    assert child_workflow_id(WF, second["kid"].activity_id) == second["kid"].idempotency_key
    assert visit_tag("run", 1) == "run#1" and visit_tag("run", 1, base) == f"run#1@{base}"
    timers = [e.payload for e in r.history if isinstance(e.payload, TimerScheduled)]
    assert [t.timer_id for t in timers] == ["run#1/timeout"]  # run 2 waits after its steps
    assert check_history(r.history) == []


def test_a_late_report_of_an_earlier_run_is_refused_in_the_later_one() -> None:
    """Item 1 (issue 44 #3): run 1's late report never completes run 2's attempt."""
    r, first, second, run1 = _two_runs()
    run2 = r.state.run_id  # type: ignore[union-attr]
    late = CompleteActivity(first["work"].activity_id, 1, '{"late": true}')
    assert r.refused(late, T0 + 13_000, run1) == (
        f"completion of activity 'run#1/work' attempt 1 is of run '{run1}', not of the "
        f"current run '{run2}' of workflow '{WF}'; refused, never applied to another run"
    )
    # the same report naming run 2's activity, still of run 1: refused all the same
    forged = CompleteActivity(second["work"].activity_id, 1, "{}")
    assert "is of run" in r.refused(forged, T0 + 13_000, run1)
    beat = HeartbeatActivity(second["work"].activity_id, 1, "{}")
    assert "heartbeat of activity" in r.refused(beat, T0 + 13_000, run1)
    # a child's reply names its parent's activity; run 1's is not run 2's
    reply = FailActivity(first["kid"].activity_id, 1, "permanent", "E", "late child")
    assert r.refused(reply, T0 + 13_000) == (
        f"run '{run2}' of workflow '{WF}' has no activity 'run#1/kid'; failure of activity "
        "'run#1/kid' attempt 1 refused"
    )
    # run 2's own report is applied
    done = r.send(CompleteActivity(second["work"].activity_id, 1, "{}"), T0 + 14_000, run2)
    assert done[0] == type(done[0])(second["work"].activity_id, 1, "{}")


def test_a_timer_fires_only_when_due_and_only_in_its_run() -> None:
    """Items 1 and 2 (issue 44 #2, #4): run 1's signal timeout, armed at 0 s for 30 s and
    its wait signalled at 12 s, never fires run 2's timeout; an early fire is refused."""
    r, _first, second, run1 = _two_runs()
    run2 = r.state.run_id  # type: ignore[union-attr]
    r.send(CompleteActivity(second["work"].activity_id, 1, "{}"), T0 + 13_000, run2)
    r.send(CompleteActivity(second["kid"].activity_id, 1, "{}"), T0 + 13_000)
    [(timer_id, fire_at)] = r.state.pending_timers()  # type: ignore[union-attr]
    assert timer_id.endswith("/timeout") and timer_id != "run#1/timeout"
    assert fire_at == T0 + 13_000 + 30_000
    assert r.send(FireTimer("run#1/timeout"), T0 + 30_000, run2) == []  # run 1's: not armed
    assert r.refused(FireTimer(timer_id), T0 + 30_000, run2) == (
        f"fire of timer '{timer_id}' at {T0 + 30_000} is 13000 ms before it is due "
        f"({fire_at}); refused"
    )
    assert "is of run" in r.refused(FireTimer(timer_id), fire_at, run1)
    fired = r.send(FireTimer(timer_id), fire_at, run2)
    assert type(fired[0]).__name__ == "TimerFired"
    assert check_history(r.history) == []


@pytest.mark.parametrize(
    ("existing", "names"),
    [
        ("parent", "names the parent itself"),
        ("finished", "names a run of workflow 'kid' v1 (completed)"),
        ("other", "names a run of workflow 'other' v1 (waiting)"),
        (
            "sibling",
            "names a run of workflow 'kid' v1 (completed) started by 'p-2' for activity 'run#1/kid',",
        ),
    ],
)
def test_a_child_start_naming_a_run_that_is_not_its_child_is_refused(
    existing: str, names: str
) -> None:
    """Item 3: the start is refused (the engine then fails the parent's step with it)."""
    target = "p-1" if existing == "parent" else "kid-fixed"
    owner = Run(target)
    if existing == "parent":
        owner.send(StartWorkflow("named", 1, "{}"), T0)
    elif existing == "finished":
        owner.send(StartWorkflow("kid", 1, "{}"), T0)
    elif existing == "other":
        owner.send(StartWorkflow("other", 1, "{}"), T0)
    else:
        owner.send(StartWorkflow("kid", 1, "{}", "p-2", "run#1/kid"), T0)
    start = StartWorkflow("kid", 1, "{}", "p-1", "run#1/kid")
    with pytest.raises(CommandRejected) as exc:
        DECIDER.handle(owner.state, owner.env(start, T0 + 1), T0 + 1)
    assert str(exc.value).startswith(
        f"child workflow id '{target}' of activity 'run#1/kid' {names}"
    )
    assert str(exc.value).endswith("not a child of this step; the child start is refused")


def test_the_same_child_start_again_writes_nothing() -> None:
    owner = Run("kid-fixed")
    owner.send(StartWorkflow("kid", 1, "{}", "p-1", "run#1/kid"), T0)
    again = owner.env(StartWorkflow("kid", 1, "{}", "p-1", "run#1/kid"), T0 + 1)
    assert DECIDER.handle(owner.state, again, T0 + 1) == (owner.state, [])
