"""Terminate (docs/workflows.md, "Cancel and terminate"): the operator's hard stop ends
the run at once and compensates nothing, whatever the run is doing; a cancel of the same
run compensates first. Histories check, fold back and replay."""

from __future__ import annotations

import pytest

from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.history.replay import replay_history
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import (
    CancelWorkflow,
    CompensationStarted,
    FailActivity,
    TerminateWorkflow,
    WorkflowTerminated,
)
from tests.unit.domain.test_domain_compensation import Run, travel


def _booked() -> Run:
    r = Run(travel())
    r.start()
    r.complete("run#1/hotel", {"id": "H1"})
    return r


def _checked(r: Run) -> None:
    assert check_history(r.history) == []
    assert r.d.fold(r.history) == r.s
    assert r.d.summarize(None, r.history) == r.s.summary()
    [report] = replay_history(r.d, r.history)
    assert report.ok and report.folded_only == 0 and report.redecided == report.groups


def test_terminate_ends_a_run_holding_effects_without_compensating() -> None:
    r = _booked()
    events = r.send(TerminateWorkflow("fraud suspected"), mid="term-1")
    assert events == [WorkflowTerminated("fraud suspected")]
    assert r.s.status == "terminated" and r.s.cancel_reason == "fraud suspected"
    assert r.s.in_flight == set() and r.s.pending_timers() == []
    assert r.send(TerminateWorkflow("again"), mid="term-1") == []  # redelivered: nothing
    with pytest.raises(CommandRejected, match=r"^workflow 'wf-1' is terminated; cancel refused$"):
        r.send(CancelWorkflow("late"), mid="cancel-1")
    with pytest.raises(
        CommandRejected, match=r"^workflow 'wf-1' is terminated; terminate refused$"
    ):
        r.send(TerminateWorkflow("twice"), mid="term-2")
    _checked(r)


def test_a_cancel_of_the_same_run_compensates_first() -> None:
    r = _booked()
    events = r.send(CancelWorkflow("changed plans"))
    assert isinstance(events[0], CompensationStarted)


def test_terminate_stops_a_compensation_midway() -> None:
    r = _booked()
    r.send(CancelWorkflow("changed plans"), mid="cancel-1")
    assert r.s.status == "compensating" and "run#1/hotel/undo" in r.s.in_flight
    events = r.send(TerminateWorkflow("stop undoing"), mid="term-1")
    assert events == [WorkflowTerminated("stop undoing")]
    assert r.s.status == "terminated" and r.s.in_flight == set()
    _checked(r)


def test_terminate_is_taken_by_a_run_that_needs_attention() -> None:
    r = _booked()
    r.complete("run#1/flight", {"id": "F1"})
    act = r.s.activities["run#1/card"]
    r.send(FailActivity("run#1/card", act.attempt, "unknown", "Timeout", "no answer"))
    assert r.s.status == "needs_attention"
    assert r.send(TerminateWorkflow("written off")) == [WorkflowTerminated("written off")]
    assert r.s.status == "terminated"
    _checked(r)


def test_summarize_names_a_terminated_run() -> None:
    r = _booked()
    r.send(TerminateWorkflow("fraud suspected"))
    summary = r.d.summarize(None, r.history)
    assert summary.status == "terminated" and summary.cancel_reason == "fraud suspected"
