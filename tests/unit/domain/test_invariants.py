"""The history invariants (orchestrator/domain/history/invariants.py), each broken alone.

Every test starts from one sound history (two runs joined by continue-as-new, with
retries, a status query and a human task) and breaks exactly one rule, so a checker
that confused two rules would report the wrong one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from orchestrator.domain.history.invariants import (
    HistoryChecker,
    Invariant,
    Violation,
    check_histories,
    check_history,
)
from orchestrator.domain.model.keys import idempotency_key
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    Envelope,
    HumanTaskDecided,
    HumanTaskOpened,
    StateEntered,
    TimerFired,
    TimerScheduled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
)

WF = "wf-1"
RUN1, RUN2 = "run-1", "run-2"
TOKEN = "ab" * 32
PROOF = "cd" * 32


def _scheduled(activity: str, logical: int, attempt: int, key: str | None = None) -> Any:
    key = key or idempotency_key(WF, "pay", logical)
    return ActivityScheduled(activity, "pay", "pay", "{}", logical, attempt, key)


def _opened(task_id: str, token: str = TOKEN) -> HumanTaskOpened:
    return HumanTaskOpened(
        task_id, "approve", "bob", "approver", "{}", "e", "r", "a", 1, "1", "op", 0, 0, token
    )


def _decided(task_id: str) -> HumanTaskDecided:
    d = HumanTaskDecided(task_id, "approve", "bob", "r", "e", "op", 5)
    fields = {"token_hash": TOKEN, "proof": PROOF}
    if all(hasattr(d, f) for f in fields):  # the fields exist once Envelope v6 is in
        d = replace(d, **fields)  # type: ignore[type-var]
    return d


def _payloads() -> list[tuple[str, Any]]:
    """(run id, payload) of a sound two-run history."""
    return [
        (RUN1, WorkflowStarted("flow", 1, "digest", "{}")),
        (RUN1, StateEntered("pay", 1)),
        (RUN1, _scheduled("pay#1/pay", 1, 1)),
        (RUN1, ActivityFailed("pay#1/pay", 1, "transient", "Boom", "boom")),
        (RUN1, _scheduled("pay#1/pay", 1, 2)),  # a retry: same logical attempt and key
        (RUN1, ActivityCompleted("pay#1/pay", 2, "{}")),
        (RUN1, _opened("task-1")),
        (RUN1, _decided("task-1")),
        (RUN1, WorkflowContinuedAsNew(RUN2, "{}")),
        (RUN2, StateEntered("pay", 1)),
        (RUN2, _scheduled("pay#1@9/pay", 2, 1)),  # the new run's id: run-scoped (seq 9)
        (RUN2, ActivityCompleted("pay#1@9/pay", 1, "{}")),
        (RUN2, WorkflowCompleted("{}")),
    ]


def _history(payloads: list[tuple[str, Any]] | None = None) -> list[Envelope[Any]]:
    return [
        Envelope(f"{run}/{i}", WF, run, i, type(p).__name__, 1000 + i, p)
        for i, (run, p) in enumerate(payloads or _payloads(), 1)
    ]


def _only(violations: list[Violation], rule: Invariant) -> Violation:
    assert [v.rule for v in violations] == [rule], violations
    assert violations[0].workflow_id == WF
    return violations[0]


def test_a_sound_two_run_history_has_no_violation() -> None:
    assert check_history(_history()) == []
    assert check_history([]) == []


def test_a_gap_in_seq() -> None:
    h = _history()
    del h[3]  # the first attempt's failure: its seq is missing, nothing else changes
    v = _only(check_history(h), Invariant.SEQ)
    assert v.seq == 5 and "seq 4 missing" in v.message


def test_a_repeated_seq() -> None:
    h = _history()
    h.insert(2, replace(h[1], message_id="again"))
    v = _only(check_history(h), Invariant.SEQ)
    assert v.seq == 2 and "repeats seq 2" in v.message


def test_a_second_workflow_started() -> None:
    p = _payloads()
    p.insert(2, (RUN1, WorkflowStarted("flow", 1, "digest", "{}")))
    v = _only(check_history(_history(p)), Invariant.START)
    assert v.seq == 3 and "number 2" in v.message


def test_a_history_without_its_start() -> None:
    h = [replace(e, seq=e.seq - 1) for e in _history()[1:]]
    violations = check_history(h)
    assert {v.rule for v in violations} == {Invariant.START}
    assert [v.seq for v in violations] == [1, 0]  # seq 1 is not the start; no start at all


def test_an_event_after_the_terminal_one() -> None:
    p = _payloads()
    p.append((RUN2, StateEntered("after", 1)))
    v = _only(check_history(_history(p)), Invariant.RUN_END)
    assert v.seq == 14 and "ended with WorkflowCompleted at seq 13" in v.message


def test_a_second_terminal_event() -> None:
    p = _payloads()
    p.append((RUN2, WorkflowFailed("again")))
    v = _only(check_history(_history(p)), Invariant.RUN_END)
    assert "WorkflowFailed after run 'run-2'" in v.message


def test_the_old_run_writes_after_it_continued_as_new() -> None:
    p = _payloads()
    p[9] = (RUN1, p[9][1])
    v = _only(check_history(_history(p)), Invariant.RUN_END)
    assert v.seq == 10 and "ended with WorkflowContinuedAsNew at seq 9" in v.message


def test_the_next_run_is_not_the_one_announced() -> None:
    p = [(RUN1 if r == RUN1 else "run-x", x) for r, x in _payloads()]
    v = _only(check_history(_history(p)), Invariant.RUN_END)
    assert v.seq == 10 and "continued as 'run-2'" in v.message


def test_an_event_of_another_run_inside_a_run() -> None:
    p = _payloads()
    p[1] = ("run-other", p[1][1])
    v = _only(check_history(_history(p)), Invariant.RUN_END)
    assert v.seq == 2 and "of run 'run-other' in run 'run-1'" in v.message


def test_an_attempt_scheduled_twice() -> None:
    p = _payloads()
    p.insert(3, (RUN1, _scheduled("pay#1/pay", 1, 1)))
    v = _only(check_history(_history(p)), Invariant.ACTIVITY)
    assert v.seq == 4 and "scheduled again" in v.message


def test_an_attempt_completed_twice() -> None:
    p = _payloads()
    p.insert(6, (RUN1, ActivityCompleted("pay#1/pay", 2, "{}")))
    v = _only(check_history(_history(p)), Invariant.ACTIVITY)
    assert v.seq == 7 and "completed again" in v.message


def test_an_attempt_completed_that_was_never_scheduled() -> None:
    p = _payloads()
    p.insert(6, (RUN1, ActivityCompleted("pay#1/pay", 3, "{}")))
    v = _only(check_history(_history(p)), Invariant.ACTIVITY)
    assert "attempt 3 of activity 'pay#1/pay' completed, never scheduled" in v.message


def test_a_key_reused_by_the_next_run() -> None:
    """What continue-as-new did while its logical attempt counters restarted at 1."""
    p = _payloads()
    p[10] = (RUN2, _scheduled("pay#1@9/pay", 1, 1))
    v = _only(check_history(_history(p)), Invariant.IDEMPOTENCY_KEY)
    assert v.seq == 11 and "(run 'run-1', seq 3)" in v.message


# -- run scope (issue 44): what the code before run-scoped ids wrote ------------------------


def test_an_activity_id_of_an_earlier_run_scheduled_again() -> None:
    """Visits restarted at 1 after continue-as-new: run 2 reused run 1's activity id."""
    p = _payloads()
    p[10] = (RUN2, _scheduled("pay#1/pay", 2, 1))
    p[11] = (RUN2, ActivityCompleted("pay#1/pay", 1, "{}"))
    v = _only(check_history(_history(p)), Invariant.RUN_SCOPE)
    assert (v.seq, v.message) == (
        11,
        "activity id 'pay#1/pay' of run 'run-2' was already that of run 'run-1' (seq 3)",
    )


def test_a_timer_id_of_an_earlier_run_armed_again_and_fired_early() -> None:
    """Run 1's signal timeout left in the engine's heap fired run 2's timer of the same
    id at run 1's deadline, before run 2's."""
    p = _payloads()
    p.insert(2, (RUN1, TimerScheduled("pay#1/timeout", 5_000, "timeout:go")))
    p.insert(11, (RUN2, TimerScheduled("pay#1/timeout", 9_000, "timeout:go")))
    p.insert(12, (RUN2, TimerFired("pay#1/timeout")))
    h = _history(p)
    h[12] = replace(h[12], recorded_at=5_000)
    violations = check_history(h)
    assert [(v.rule, v.seq, v.message) for v in violations] == [
        (
            Invariant.RUN_SCOPE,
            12,
            "timer id 'pay#1/timeout' of run 'run-2' was already that of run 'run-1' (seq 3)",
        ),
        (
            Invariant.TIMER,
            13,
            "timer 'pay#1/timeout' fired at 5000, 4000 ms before it was due (9000)",
        ),
    ]


def test_a_forged_timer_fire_is_early() -> None:
    p = _payloads()
    p.insert(2, (RUN1, TimerScheduled("pay#1/escalate", 86_400_000, "human:escalate:1")))
    p.insert(3, (RUN1, TimerFired("pay#1/escalate")))
    v = _only(check_history(_history(p)), Invariant.TIMER)
    assert v.seq == 4 and "86398996 ms before it was due (86400000)" in v.message


def test_a_report_of_an_earlier_run_applied_in_a_later_one() -> None:
    """A handler's late report of run 1 completed run 2's attempt."""
    h = _history()
    h[11] = replace(h[11], causation_id="run-1/3/task/report/1")
    v = _only(check_history(h), Invariant.RUN_SCOPE)
    assert v.message == (
        "ActivityCompleted of activity 'pay#1@9/pay' in run 'run-2' applies a report of run "
        "'run-1' (caused by 'run-1/3/task/report/1')"
    )


def test_a_child_step_naming_the_parent_itself() -> None:
    p = _payloads()
    child = ActivityScheduled("pay#1/kid", "keel.child:kid", "kid", "{}", 1, 1, WF)
    p.insert(6, (RUN1, child))
    v = _only(check_history(_history(p)), Invariant.CHILD)
    assert v.seq == 7
    assert v.message == (
        "child step 'pay#1/kid' names the parent itself as its child workflow id and was never told"
    )
    # the engine's answer (ChildWorkflowIdInUse): the step failed, the parent did not hang
    p.insert(7, (RUN1, ActivityFailed("pay#1/kid", 1, "permanent", "ChildWorkflowIdInUse", "m")))
    assert check_history(_history(p)) == []


def _child_history(child_parent: tuple[str | None, str | None], settled: bool) -> list[Any]:
    parent = _history(
        [
            (RUN1, WorkflowStarted("flow", 1, "digest", "{}")),
            (RUN1, StateEntered("run", 1)),
            (RUN1, ActivityScheduled("run#1/kid", "keel.child:kid", "kid", "{}", 1, 1, "k-1")),
        ]
        + ([(RUN1, ActivityFailed("run#1/kid", 1, "permanent", "E", "m"))] if settled else [])
    )
    started = WorkflowStarted("other", 1, "d", "{}", 0, *child_parent)
    return [Envelope("c/1", "k-1", "c", 1, "WorkflowStarted", 1, started), *parent]


@pytest.mark.parametrize(
    ("child_parent", "by"),
    [((None, None), "no parent"), (("wf-0", "a#1/kid"), "'wf-0' for 'a#1/kid'")],
)
def test_a_child_step_naming_a_run_that_is_not_its_child(
    child_parent: tuple[str | None, str | None], by: str
) -> None:
    violations = check_histories(_child_history(child_parent, settled=False))
    assert [(v.workflow_id, v.seq, v.rule, v.message) for v in violations] == [
        (
            WF,
            3,
            Invariant.CHILD,
            f"child step 'run#1/kid' names workflow 'k-1', a run started by {by}: the step "
            "waits for a child that is not its own",
        )
    ]
    # told (the new code fails the step), or its own child: nothing to flag
    assert check_histories(_child_history(child_parent, settled=True)) == []
    assert check_histories(_child_history((WF, "run#1/kid"), settled=False)) == []


def test_a_key_reused_by_another_activity() -> None:
    p = _payloads()
    key = idempotency_key(WF, "pay", 1)
    p.insert(6, (RUN1, _scheduled("other#1/pay", 5, 1, key)))
    p.insert(7, (RUN1, ActivityCompleted("other#1/pay", 1, "{}")))
    v = _only(check_history(_history(p)), Invariant.IDEMPOTENCY_KEY)
    assert "activity 'pay#1/pay' logical attempt 1" in v.message


def test_a_decision_without_its_task() -> None:
    p = [x for x in _payloads() if not isinstance(x[1], HumanTaskOpened)]
    v = _only(check_history(_history(p)), Invariant.HUMAN_DECISION)
    assert "without HumanTaskOpened" in v.message


needs_v6 = pytest.mark.skipif(
    not hasattr(_decided("t"), "proof"), reason="HumanTaskDecided has no token_hash/proof yet"
)


@needs_v6
def test_a_decision_with_another_token() -> None:
    p = _payloads()
    p[6] = (RUN1, _opened("task-1", token="ef" * 32))
    v = _only(check_history(_history(p)), Invariant.HUMAN_DECISION)
    assert "token hash" in v.message


@needs_v6
@pytest.mark.parametrize("proof", ["", "CD" * 32, "cd" * 31, "zz" * 32])
def test_a_decision_whose_proof_is_not_64_hex(proof: str) -> None:
    p = _payloads()
    p[7] = (RUN1, replace(p[7][1], proof=proof))
    v = _only(check_history(_history(p)), Invariant.HUMAN_DECISION)
    assert "64 lowercase hex" in v.message


def test_the_injected_proof_check_decides() -> None:
    seen: list[tuple[str, str]] = []

    def refuse(workflow_id: str, decided: HumanTaskDecided) -> bool:
        seen.append((workflow_id, decided.task_id))
        return False

    violations = check_history(_history(), proof_ok=refuse)
    if not hasattr(_decided("t"), "proof"):
        assert violations == [] and seen == []  # nothing to check before Envelope v6
        return
    assert seen == [(WF, "task-1")]
    assert "does not verify" in _only(violations, Invariant.HUMAN_DECISION).message
    assert check_history(_history(), proof_ok=lambda w, d: True) == []


def test_an_envelope_of_another_workflow_or_not_an_event() -> None:
    h = _history()
    stray = replace(h[1], workflow_id="wf-2")
    v = _only(check_history([*h, stray]), Invariant.RECORD)
    assert "'wf-2'" in v.message


def test_the_checker_streams_and_finishes_once() -> None:
    checker = HistoryChecker(WF)
    for env in _history()[1:]:
        checker.feed(replace(env, seq=env.seq - 1))
    assert checker.events == 12
    first = checker.finish()
    assert [v.rule for v in first].count(Invariant.START) == 2
    assert checker.finish() == first
    assert str(first[-1]) == "wf-1 seq 0 [start]: the history has no WorkflowStarted"
