"""Compensation in the decider (docs/sagas.md): order, outcomes, failures, cancels, the
validator, and that history folds back to the same state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import (
    Compensation,
    Decider,
    DefinitionError,
    OnCancel,
    RetryPolicy,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    WorkflowState,
    idempotency_key,
)
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CancelWorkflow,
    CompensationFailed,
    CompensationStarted,
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    HumanTaskOpened,
    ResolveActivity,
    StartWorkflow,
    WorkflowCancelled,
    WorkflowCompensated,
    WorkflowCompensationFailed,
    WorkflowFailed,
    WorkflowNeedsAttention,
)

T0 = 1_700_000_000_000


class Trip(BaseModel):
    trip: str


def undo(activity: str, **kw: Any) -> Compensation:
    return Compensation(activity, input=lambda r: {"reservation": r["id"]}, **kw)


def travel(**kw: Any) -> WorkflowDefinition:
    retry = kw.pop("undo_retry", RetryPolicy(max_attempts=2, initial_interval_ms=10))
    return WorkflowDefinition.dag(
        "trip",
        1,
        Trip,
        [
            Step("hotel", "book_hotel", compensation=undo("cancel_hotel", retry=retry)),
            Step(
                "flight",
                "book_flight",
                after="hotel",
                compensation=undo("cancel_flight", retry=retry),
            ),
            Step("card", "charge_card", after="flight", on_exhausted="fail"),
        ],
        output=lambda ctx: {"ok": True},
        **kw,
    )


class Run:
    def __init__(self, definition: WorkflowDefinition) -> None:
        self.d = Decider([definition])
        self.name = definition.name
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0
        self.now = T0

    def send(self, payload: Any, mid: str | None = None) -> list[Any]:
        self.n += 1
        self.now += 10
        env: Envelope[Any] = Envelope(
            mid or f"cmd-{self.n}", "wf-1", "", 0, type(payload).__name__, self.now, payload
        )
        self.state, events = self.d.handle(self.state, env, now_ms=self.now)
        self.history.extend(events)
        return [e.payload for e in events]

    def start(self, data: dict[str, Any] | None = None) -> list[Any]:
        return self.send(StartWorkflow(self.name, None, json.dumps(data or {"trip": "t"})))

    @property
    def s(self) -> WorkflowState:
        assert self.state is not None
        return self.state

    def complete(self, aid: str, result: Any = None) -> list[Any]:
        act = self.s.activities[aid]
        body = result if result is not None else {"id": f"R-{aid}"}
        return self.send(CompleteActivity(aid, act.attempt, json.dumps(body)))

    def fail(self, aid: str, cls: str = "permanent") -> list[Any]:
        act = self.s.activities[aid]
        return self.send(FailActivity(aid, act.attempt, cls, "Declined", "card declined"))

    def fire_all(self) -> list[Any]:
        out: list[Any] = []
        for tid, _ in self.s.pending_timers():
            out += self.send(FireTimer(tid))
        return out

    def undone(self) -> list[str]:
        """Activity ids whose compensation was dispatched, in order."""
        return [
            e.payload.activity_id.removesuffix("/undo")
            for e in self.history
            if isinstance(e.payload, ActivityScheduled)
            and e.payload.activity_id.endswith("/undo")
            and e.payload.attempt == 1
        ]


def booked() -> Run:
    r = Run(travel())
    r.start()
    r.complete("run#1/hotel", {"id": "H1"})
    r.complete("run#1/flight", {"id": "F1"})
    return r


def test_a_declined_card_undoes_flight_then_hotel_and_ends_compensated() -> None:
    r = booked()
    events = r.fail("run#1/card")
    started = next(e for e in events if isinstance(e, CompensationStarted))
    assert (started.cause, json.loads(started.plan_json)) == (
        "failed",
        ["run#1/flight", "run#1/hotel"],
    )
    assert "card declined" in started.reason
    assert not any(isinstance(e, WorkflowFailed) for e in events)
    first = events[-1]
    assert isinstance(first, ActivityScheduled)
    assert (first.activity_id, first.activity_type, json.loads(first.input_json)) == (
        "run#1/flight/undo",
        "cancel_flight",
        {"reservation": "F1"},
    )
    assert first.idempotency_key == idempotency_key("wf-1", "cancel_flight", 1)
    assert r.s.status == "compensating"
    nxt = r.complete("run#1/flight/undo", {"cancelled": True})
    assert [type(e).__name__ for e in nxt] == ["ActivityCompleted", "ActivityScheduled"]
    assert nxt[1].activity_id == "run#1/hotel/undo" and json.loads(nxt[1].input_json) == {
        "reservation": "H1"
    }
    end = r.complete("run#1/hotel/undo", {"cancelled": True})
    assert isinstance(end[-1], WorkflowCompensated) and "card declined" in end[-1].reason
    assert r.s.status == "compensated" and r.s.failure_reason == end[-1].reason
    assert r.undone() == ["run#1/flight", "run#1/hotel"]
    # the recorded results of the steps stay theirs (a compensation's result is not a step's)
    assert json.loads(r.s.step_results["flight"]) == {"id": "F1"}


def test_a_failure_before_any_effect_just_fails() -> None:
    r = Run(travel())
    r.start()
    events = r.fail("run#1/hotel")
    assert isinstance(events[-1], WorkflowFailed) and r.s.status == "failed"


def test_a_compensation_that_keeps_failing_gives_way_and_ends_compensation_failed() -> None:
    r = booked()
    r.fail("run#1/card")
    r.fail("run#1/flight/undo", "transient")  # attempt 1 of 2: a retry timer
    assert r.s.activities["run#1/flight/undo"].status == "backoff"
    r.fire_all()  # attempt 2 goes out with the same key
    assert r.s.activities["run#1/flight/undo"].attempt == 2
    events = r.fail("run#1/flight/undo", "transient")  # past its bounds
    gave_up = next(e for e in events if isinstance(e, CompensationFailed))
    assert gave_up.activity_id == "run#1/flight" and "after 2 attempts" in gave_up.reason
    assert events[-1].activity_id == "run#1/hotel/undo"  # the others still happen
    end = r.complete("run#1/hotel/undo")
    task, last = end[-2], end[-1]
    assert isinstance(task, HumanTaskOpened) and isinstance(last, WorkflowCompensationFailed)
    assert r.s.status == "compensation_failed" and last.task_id == task.task_id
    assert task.task_id == "wf-1/" + r.s.run_id + "/compensation#0"
    assert (task.task_name, task.role, task.resource) == (
        "undo_by_hand",
        "operator",
        "keel.compensate",
    )
    evidence = json.loads(task.evidence_json)
    [left] = evidence["left_to_undo"]
    assert left["step"] == "flight" and left["compensation"] == "cancel_flight"
    assert left["compensation_key"] == idempotency_key("wf-1", "cancel_flight", 1)
    assert left["compensation_input"] == {"reservation": "F1"} and "Declined" in left["error"]
    assert evidence["undone"] == ["run#1/hotel"]
    assert "'flight' (run#1/flight)" in last.reason and task.task_id in last.reason
    assert r.s.human_tasks[task.task_id].is_open


def test_an_undo_whose_outcome_is_unknown_waits_for_an_operator_then_the_others_run() -> None:
    r = booked()
    r.fail("run#1/card")
    events = r.fail("run#1/flight/undo", "unknown")  # no status query on cancel_flight
    assert isinstance(events[-1], WorkflowNeedsAttention)
    assert events[-1].activity_id == "run#1/flight/undo"
    assert r.s.status == "needs_attention" and r.s.pending_timers() == []
    assert r.undone() == ["run#1/flight"]  # never dispatched again on its own
    events = r.send(ResolveActivity("run#1/flight/undo", "found", '{"cancelled": true}', "ok"))
    assert events[-1].activity_id == "run#1/hotel/undo"  # the saga goes on
    end = r.complete("run#1/hotel/undo")
    assert isinstance(end[-1], WorkflowCompensated) and r.s.status == "compensated"
    assert check_history(r.history) == []


def test_a_compensation_input_that_raises_is_given_up_and_the_others_run() -> None:
    bad = Compensation("cancel_flight", input=lambda r: r["missing"])
    d = WorkflowDefinition.dag(
        "trip",
        1,
        Trip,
        [
            Step("hotel", "book_hotel", compensation="cancel_hotel"),
            Step("flight", "book_flight", after="hotel", compensation=bad),
            Step("card", "charge_card", after="flight"),
        ],
        output=lambda ctx: {},
    )
    r = Run(d)
    r.start()
    r.complete("run#1/hotel", {"id": "H1"})
    r.complete("run#1/flight", {"id": "F1"})
    events = r.fail("run#1/card")
    gave_up = next(e for e in events if isinstance(e, CompensationFailed))
    assert "KeyError('missing')" in gave_up.reason
    # the default input of a compensation is the step's recorded result
    assert events[-1].activity_id == "run#1/hotel/undo" and json.loads(events[-1].input_json) == {
        "id": "H1"
    }
    r.complete("run#1/hotel/undo")
    assert r.s.status == "compensation_failed"


def test_cancelling_compensates_first_then_ends_cancelled() -> None:
    r = Run(travel())
    r.start()
    r.complete("run#1/hotel", {"id": "H1"})
    events = r.send(CancelWorkflow("customer changed plans"), mid="cancel-1")
    assert isinstance(events[0], CompensationStarted) and events[0].cause == "cancelled"
    assert r.send(CancelWorkflow("again"), mid="cancel-1") == []  # redelivered: nothing
    with pytest.raises(CommandRejected, match=r"is compensating .*; cancel refused"):
        r.send(CancelWorkflow("another"), mid="cancel-2")
    end = r.complete("run#1/hotel/undo")
    assert isinstance(end[-1], WorkflowCancelled) and end[-1].reason == "customer changed plans"
    assert r.s.status == "cancelled"


def test_on_cancel_abandon_leaves_the_effects() -> None:
    r = Run(travel(on_cancel=OnCancel.ABANDON))
    r.start()
    r.complete("run#1/hotel", {"id": "H1"})
    events = r.send(CancelWorkflow("stop"))
    assert [type(e) for e in events] == [WorkflowCancelled] and r.s.status == "cancelled"


def diamond() -> WorkflowDefinition:
    def comp(name: str) -> Compensation:
        return Compensation(f"undo_{name}")

    return WorkflowDefinition.dag(
        "diamond",
        1,
        Trip,
        [
            Step("a", "a", compensation=comp("a")),
            Step("b", "b", after="a", compensation=comp("b")),
            Step("c", "c", after="a", compensation=comp("c")),
            Step("d", "d", after=["b", "c"], compensation=comp("d")),
            Step("e", "e", after="d"),
        ],
        output=lambda ctx: {},
    )


@pytest.mark.parametrize(
    ("branches", "expected"),
    [(["b", "c"], ["d", "c", "b", "a"]), (["c", "b"], ["d", "b", "c", "a"])],
)
def test_a_dag_is_undone_in_reverse_completion_order_dependants_first(
    branches: list[str], expected: list[str]
) -> None:
    r = Run(diamond())
    r.start()
    for step in ["a", *branches, "d"]:
        r.complete(f"run#1/{step}", {"id": step})
    r.fail("run#1/e")
    for aid in [f"run#1/{s}" for s in expected]:
        r.complete(aid + "/undo")
    assert r.undone() == [f"run#1/{s}" for s in expected]
    assert r.s.status == "compensated"
    position = {aid: i for i, aid in enumerate(r.undone())}
    for step in diamond().steps_by_name.values():  # every dependant before what it needs
        for dep in step.after:
            if step.name != "e":
                assert position[f"run#1/{step.name}"] < position[f"run#1/{dep}"]


def test_a_state_visited_twice_undoes_both_visits_newest_first() -> None:
    d = WorkflowDefinition(
        "loop",
        1,
        Trip,
        [
            State(
                "reserve",
                steps=[Step("seat", "reserve_seat", compensation="release_seat")],
                transitions=[
                    Transition("reserve", when=lambda ctx: ctx.visits["reserve"] < 2),
                    Transition("pay"),
                ],
            ),
            State("pay", steps=[Step("pay", "pay")], complete=lambda ctx: {}),
        ],
    )
    r = Run(d)
    r.start()
    r.complete("reserve#1/seat", {"seat": 1})
    r.complete("reserve#2/seat", {"seat": 2})
    events = r.fail("pay#1/pay")
    plan = next(e for e in events if isinstance(e, CompensationStarted)).plan_json
    assert json.loads(plan) == ["reserve#2/seat", "reserve#1/seat"]
    assert json.loads(events[-1].input_json) == {"seat": 2}
    r.complete("reserve#2/seat/undo")
    r.complete("reserve#1/seat/undo")
    assert r.undone() == ["reserve#2/seat", "reserve#1/seat"] and r.s.status == "compensated"
    keys = {a.idempotency_key for a in r.s.activities.values() if a.activity_type == "release_seat"}
    assert keys == {idempotency_key("wf-1", "release_seat", n) for n in (1, 2)}


def test_history_folds_snapshots_and_summarizes_to_the_same_state() -> None:
    r = booked()
    r.fail("run#1/card")
    mid = r.s
    assert r.d.fold(r.history) == mid
    assert WorkflowState.from_json(mid.to_json()) == mid
    r.complete("run#1/flight/undo")
    r.complete("run#1/hotel/undo")
    folded = r.d.fold(r.history)
    assert folded == r.s
    assert r.d.summarize(None, r.history) == r.s.summary()


# -- the validator ------------------------------------------------------------------------


def test_a_compensable_step_after_an_irreversible_one_is_refused_with_the_reason() -> None:
    steps = [
        Step("email", "send_email", irreversible=True),
        Step("hotel", "book_hotel", after="email", compensation="cancel_hotel"),
    ]
    with pytest.raises(DefinitionError) as err:
        WorkflowDefinition.dag("w", 1, Trip, steps, output=lambda ctx: {})
    assert str(err.value) == (
        "workflow 'w' v1: step 'hotel' (state 'run') is compensable but may run after "
        "irreversible step 'email' (state 'run'): a failure after it would undo 'hotel' but "
        "cannot undo 'email'; put irreversible steps last, or pass "
        "compensation_after_irreversible=True to accept that"
    )
    ok = WorkflowDefinition(
        "w",
        1,
        Trip,
        [State("run", steps=steps, complete=lambda ctx: {})],
        compensation_after_irreversible=True,
    )
    assert "compensation_after_irreversible" in ok.describe()


def test_irreversible_steps_last_or_in_parallel_are_accepted() -> None:
    WorkflowDefinition.dag(
        "w",
        1,
        Trip,
        [
            Step("hotel", "book_hotel", compensation="cancel_hotel"),
            Step("email", "send_email", after="hotel", irreversible=True),
            Step("audit", "log", irreversible=True),
        ],
        output=lambda ctx: {},
    )


def test_a_later_state_counts_as_after() -> None:
    states = [
        State(
            "notify",
            steps=[Step("email", "send_email", irreversible=True)],
            transitions=[Transition("book")],
        ),
        State(
            "book",
            steps=[Step("hotel", "book_hotel", compensation="cancel_hotel")],
            complete=lambda ctx: {},
        ),
    ]
    with pytest.raises(DefinitionError, match="step 'hotel' \\(state 'book'\\) is compensable"):
        WorkflowDefinition("w", 1, Trip, states)


def test_irreversible_and_compensated_at_once_is_refused() -> None:
    with pytest.raises(DefinitionError, match="is irreversible and has a compensation"):
        WorkflowDefinition.dag(
            "w",
            1,
            Trip,
            [Step("x", "x", irreversible=True, compensation="undo_x")],
            output=lambda ctx: {},
        )


def test_compensation_activities_are_activity_types_and_in_the_digest() -> None:
    d = travel()
    assert {"cancel_hotel", "cancel_flight"} <= d.activity_types
    plain = WorkflowDefinition.dag(
        "trip",
        1,
        Trip,
        [
            Step("hotel", "book_hotel"),
            Step("flight", "book_flight", after="hotel"),
            Step("card", "charge_card", after="flight", on_exhausted="fail"),
        ],
        output=lambda ctx: {"ok": True},
    )
    assert plain.digest != d.digest
    assert '"compensation":' not in json.dumps(plain.describe())


def test_replay_redecides_a_cancel_that_compensated() -> None:
    from orchestrator.domain.history.replay import replay_history

    r = Run(travel())
    r.start()
    r.complete("run#1/hotel", {"id": "H1"})
    r.send(CancelWorkflow("stop"))
    r.complete("run#1/hotel/undo")
    [report] = replay_history(r.d, r.history)
    assert report.ok and report.folded_only == 0 and report.redecided == report.groups
