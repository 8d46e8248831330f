"""Histories the code before run-scoped ids wrote (issue 44): the invariants that ``keel
workflow verify`` checks flag each broken promise, and the new code still folds them.

The fixture (tests/unit/domain/histories/, its README says how it was recorded) holds one
workflow per item: ids, a report and a timer of run 1 applied in run 2, a forged timer
fire, and child ids naming a finished run and the parent itself.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from orchestrator.client.history_io import read_history_file
from orchestrator.domain import Decider
from orchestrator.domain.authoring.definitions import State, Step, WorkflowDefinition
from orchestrator.domain.history.invariants import check_histories
from orchestrator.domain.model.messages import CompleteActivity, Envelope
from tests.unit.domain.test_run_scope import Count, kid, looper  # the definitions recorded

OLD = Path(__file__).parent / "histories" / "run_scope_old_code.jsonl"
T = 1_700_000_020_000


DEFINITIONS = [kid, looper] + [
    WorkflowDefinition(
        name,
        1,
        Count,
        [
            State(
                "run",
                steps=[Step.child("kid", "kid", workflow_id=lambda ctx, c=child: c)],
                complete=lambda ctx: {},
            )
        ],
    )
    for name, child in (("named", "kid-fixed"), ("selfish", "p-self-old"))
]


def test_verify_flags_every_run_scope_promise_the_old_code_broke() -> None:
    violations = check_histories(read_history_file(OLD))
    assert sorted((v.workflow_id, v.seq, str(v.rule)) for v in violations) == [
        ("forged-old", 8, "timer"),  # a forged FireTimer fired a 30 s timeout at once
        ("loop-old", 11, "run_scope"),  # run 2 reused run 1's activity id
        ("loop-old", 12, "idempotency_key"),  # ... and its derived child id
        ("loop-old", 12, "run_scope"),
        ("loop-old", 13, "run_scope"),  # run 1's late report completed run 2's attempt
        ("loop-old", 15, "run_scope"),  # run 2 reused run 1's timer id
        ("loop-old", 16, "timer"),  # ... which run 1's stale entry fired 14 s early
        ("p-old", 3, "child"),  # a child id naming a finished run: the parent hangs
        ("p-self-old", 3, "child"),  # a child id naming the parent itself: it hangs
    ]
    by_place = {(v.workflow_id, v.seq, str(v.rule)): v.message for v in violations}
    assert by_place["loop-old", 13, "run_scope"].endswith(
        "applies a report of run 'start-a' (caused by 'start-a/3/task/report/2')"
    )
    assert by_place["loop-old", 16, "timer"] == (
        "timer 'run#1/timeout' fired at 1700000030002, 13998 ms before it was due (1700000044000)"
    )
    assert by_place["p-old", 3, "child"] == (
        "child step 'run#1/kid' names workflow 'kid-fixed', a run started by no parent: the "
        "step waits for a child that is not its own"
    )


def test_the_new_code_still_folds_the_old_histories() -> None:
    decider = Decider(DEFINITIONS)
    envelopes = read_history_file(OLD)
    for wf in sorted({e.workflow_id for e in envelopes}):
        events = [e for e in envelopes if e.workflow_id == wf]
        state = decider.fold(events)
        assert state is not None and state.seq == events[-1].seq


def test_a_run_continued_by_the_old_code_keeps_its_visits_untagged_ids_in_flight() -> None:
    """Upgraded mid-visit: run 2 of ``loop-old`` holds ``run#1/work`` and ``run#1/kid`` in
    flight under the old ids; the new code completes them there and dispatches neither
    again under the run-scoped ids (``WorkflowState.visit_tag``)."""
    decider = Decider(DEFINITIONS)
    events = [e for e in read_history_file(OLD) if e.workflow_id == "loop-old"][:12]
    state = decider.fold(events)
    assert state is not None and state.run_base_seq == 9
    assert state.visit_tag() == "run#1"  # its visit's activities are in flight untagged
    done = Envelope("w", "loop-old", state.run_id, 0, "CompleteActivity", T, None)
    state, out = decider.handle(
        state, replace(done, payload=CompleteActivity("run#1/work", 1, "{}")), T
    )
    assert [e.type for e in out] == ["ActivityCompleted"]  # nothing dispatched again
    assert state is not None and state.visit_tag() == "run#1"
    kid_done = replace(done, message_id="k", payload=CompleteActivity("run#1/kid", 1, "{}"))
    state, out = decider.handle(state, kid_done, T)
    assert [e.type for e in out] == ["ActivityCompleted", "TimerScheduled"]
    # nothing of the visit is in flight any more: its wait's timer is run-scoped, never
    # run 1's ``run#1/timeout``
    assert out[1].payload.timer_id == "run#1@9/timeout"
    assert state is not None and state.visit_tag() == "run#1@9"
