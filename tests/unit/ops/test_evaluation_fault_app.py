"""The worker's side of ``keel evaluate --app`` (``ops/evaluation/fault_app.py``): what each
activity type is to the faults, and the handlers wrapped to keep the book and inject each
fault (the book in memory here; the integration test keeps it in Redis)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel


class Trip(BaseModel):
    trip: str


def _user_app(calls: list[str]) -> Any:
    """A write with a status query and a compensation, a read, and a @side_effect write."""
    from orchestrator import KeelApp, Step, WorkflowDefinition, side_effect

    app = KeelApp("mine")

    @app.activity("book")
    def book(arg: Any) -> dict[str, str]:
        calls.append("book")
        return {"booking": "B1"}

    @app.activity("book_status")
    def book_status(arg: Any) -> dict[str, bool]:
        return {"found": False}

    @app.activity("cancel")
    async def cancel(arg: Any) -> dict[str, bool]:
        calls.append("cancel")
        return {"cancelled": True}

    @app.activity("look")
    def look(arg: Any) -> int:
        calls.append("look")
        return 1

    @app.activity("mail")
    @side_effect
    def mail(arg: Any) -> int:
        calls.append("mail")
        return 2

    steps = [
        Step("book", "book", status_query="book_status", compensation="cancel"),
        Step("look", "look", after="book"),
        Step("mail", "mail", after="look"),
    ]
    app.workflow(WorkflowDefinition.dag("trip", 1, Trip, steps, output=lambda ctx: None))
    return app


class MemoryBook:
    """The book's calls, kept in this process."""

    def __init__(self) -> None:
        self.returned_calls: list[tuple[str, str]] = []
        self.fired_n = 0
        self.writes = 0
        self.lost: set[str] = set()
        self.outage_from: int | None = None
        self.runs_with_work: set[str] = set()
        self.held_run: str | None = None

    def returned(self, activity_type: str, idempotency_key: str) -> None:
        self.returned_calls.append((activity_type, idempotency_key))

    def ran(self, workflow_id: str) -> None:
        self.runs_with_work.add(workflow_id)

    def hold(self, workflow_id: str) -> bool:
        if workflow_id not in self.runs_with_work or self.held_run is not None:
            return False
        self.held_run = workflow_id
        return True

    def fired(self) -> None:
        self.fired_n += 1

    def lose_answer(self, idempotency_key: str) -> bool:
        self.writes += 1
        if self.writes % 3 != 1 or idempotency_key in self.lost:
            return False
        self.lost.add(idempotency_key)
        return True

    def outage_from_ms(self) -> int:
        import time

        if self.outage_from is None:
            self.outage_from = int(time.time() * 1000)
        return self.outage_from


def _in_activity(fn: Any, kind: str, key: str, attempt: int = 1, wf: str = "wf") -> Any:
    """Call ``fn`` as the worker does: inside the activity's context."""
    from handlers.sdk.activity_context import ActivityContext, reset_current, set_current

    ctx = ActivityContext(wf, "a1", kind, attempt, 1, key, 0, lambda _: None)
    token = set_current(ctx)
    try:
        out = fn({"trip": "T"})
        return asyncio.run(out) if asyncio.iscoroutine(out) else out
    finally:
        reset_current(token)


def _wrapped(fault: str, calls: list[str]) -> tuple[Any, MemoryBook]:
    from ops.evaluation.fault_app import wrapped_app
    from ops.evaluation.fault_plans import FaultClass

    book = MemoryBook()
    return wrapped_app(_user_app(calls), "trip", FaultClass(fault), book), book  # type: ignore[arg-type]


def test_writes_compensations_and_side_effects_are_told_apart() -> None:
    from ops.evaluation.app_batch import striking_faults
    from ops.evaluation.fault_app import roles_of
    from ops.evaluation.fault_plans import FaultClass
    from orchestrator.examples import app as examples

    roles = roles_of(_user_app([]), "trip")
    assert roles.writes == {"book", "mail"}  # a status query; a @side_effect handler
    assert (roles.compensations, roles.side_effects) == ({"cancel"}, {"mail"})
    travel = roles_of(examples, "travel_booking")
    assert travel.writes == {"reserve_hotel", "reserve_flight", "charge_card"}
    assert travel.compensations == {"cancel_reservation"}
    timers = roles_of(examples, "timer_demo")
    strikes = striking_faults(timers)
    assert [f for f, why in strikes.items() if not why] == [
        FaultClass.NONE,
        FaultClass.CRASH,
        FaultClass.DUPLICATE_CALLBACKS,
        FaultClass.OLD_SCHEMA,
    ]


def test_every_call_that_returns_is_in_the_book_and_the_handlers_stay_what_they_were() -> None:
    from handlers.sdk.markers import has_side_effect

    calls: list[str] = []
    app, book = _wrapped("none", calls)
    assert _in_activity(app.handlers["book"].fn, "book", "k1") == {"booking": "B1"}
    assert _in_activity(app.handlers["cancel"].fn, "cancel", "k2") == {"cancelled": True}
    assert app.handlers["cancel"].is_async and has_side_effect(app.handlers["mail"].fn)
    assert calls == ["book", "cancel"] and book.fired_n == 0
    assert book.returned_calls == [("book", "k1"), ("cancel", "k2")]
    assert {k: d.digest for k, d in app.definitions.items()} == {
        k: d.digest for k, d in _user_app([]).definitions.items()
    }


def test_response_loss_loses_every_third_first_answer_of_a_write_after_it_returned() -> None:
    from orchestrator import OutcomeUnknownError

    calls: list[str] = []
    app, book = _wrapped("response_loss", calls)
    with pytest.raises(OutcomeUnknownError, match="the answer was lost after the call returned"):
        _in_activity(app.handlers["book"].fn, "book", "k1")
    assert calls == ["book"] and book.returned_calls == [("book", "k1")]
    assert _in_activity(app.handlers["book"].fn, "book", "k1", attempt=2) == {"booking": "B1"}
    assert _in_activity(app.handlers["book"].fn, "book", "k2") == {"booking": "B1"}
    assert _in_activity(app.handlers["look"].fn, "look", "k3") == 1  # a read: never lost
    assert book.fired_n == 1


def test_queue_full_refuses_writes_before_the_call_for_the_outage() -> None:
    from orchestrator import TransientError

    calls: list[str] = []
    app, book = _wrapped("queue_full", calls)
    with pytest.raises(TransientError, match="the downstream is down") as down:
        _in_activity(app.handlers["mail"].fn, "mail", "k1")
    assert down.value.retry_after_s == 1
    assert _in_activity(app.handlers["look"].fn, "look", "k2") == 1
    assert calls == ["look"] and book.fired_n == 1
    book.outage_from = 0  # long over
    assert _in_activity(app.handlers["mail"].fn, "mail", "k1") == 2


def test_compensation_failure_fails_every_compensation_and_nothing_else() -> None:
    from orchestrator import TransientError

    calls: list[str] = []
    app, book = _wrapped("compensation_failure", calls)
    for attempt in (1, 2):
        with pytest.raises(TransientError, match="the compensation keeps failing"):
            _in_activity(app.handlers["cancel"].fn, "cancel", "k1", attempt)
    assert _in_activity(app.handlers["book"].fn, "book", "k2") == {"booking": "B1"}
    assert calls == ["book"] and book.fired_n == 2


def test_old_schema_deploys_your_latest_version_again_as_the_next_migrated_at_its_waits() -> None:
    """``old_schema`` of a workflow of your own: version N+1 is N's states, with a
    migration from N at every state that waits (none: runs of N finish on N); built in
    the client and in each service, it is the same definition (one digest)."""
    from ops.evaluation.next_version import deployed, wait_states
    from orchestrator.examples import app as examples

    timers = examples.get("timer_demo")
    assert wait_states(timers) == {"sleep": "sleep"}
    one, two = deployed(examples, "timer_demo"), deployed(examples, "timer_demo")
    nxt = one.get("timer_demo")
    assert nxt.version == timers.version + 1 and list(nxt.states) == list(timers.states)
    assert dict(nxt.migrations[timers.version].states) == {"sleep": "sleep"}
    assert nxt.digest == two.get("timer_demo").digest != timers.digest
    assert one.get("timer_demo", timers.version).digest == timers.digest
    assert one.handlers == examples.handlers
    trip = deployed(_user_app([]), "trip").get("trip")
    assert (trip.version, trip.migrations) == (2, {})  # no wait: runs of v1 finish on v1


def test_crash_holds_the_first_call_of_a_run_with_work_behind_it_once_a_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch SIGKILLs the worker during the held call (here the hold is 0 s): a run
    whose first call is in flight has nothing behind it, so the hold waits for a second."""
    import ops.evaluation.fault_app as fault_app

    monkeypatch.setattr(fault_app, "HOLD_S", 0.0)
    calls: list[str] = []
    app, book = _wrapped("crash", calls)
    _in_activity(app.handlers["book"].fn, "book", "k1", wf="w1")
    _in_activity(app.handlers["book"].fn, "book", "k2", wf="w2")
    assert (book.held_run, book.fired_n) == (None, 0)
    _in_activity(app.handlers["look"].fn, "look", "k3", wf="w2")
    assert (book.held_run, book.fired_n) == ("w2", 1)
    _in_activity(app.handlers["look"].fn, "look", "k4", wf="w1")
    assert (book.held_run, book.fired_n, calls) == ("w2", 1, ["book", "book", "look", "look"])
