"""The event → metric mapping: exact counts per label set, the same whether the projector
hands envelopes or history lines, whether a run's events come in one batch or several,
and nothing guessed when a state's entry was not seen."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityResolved,
    ActivityScheduled,
    ActivityTimedOut,
    Envelope,
    HumanTaskDecided,
    HumanTaskEscalated,
    HumanTaskExpired,
    HumanTaskOpened,
    StateEntered,
    TimerFired,
    WorkflowCancelled,
    WorkflowCompensated,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
)
from orchestrator.domain.model.saga_messages import CompensationFailed, CompensationStarted
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.state_parts import ActivityState, CompensationState, HumanTaskState
from orchestrator.domain.model.vocabulary import ActivityStatus, HumanTaskStatus, WorkflowStatus
from orchestrator.records import fast_json
from orchestrator.records.history_entries import history_entry
from orchestrator.records.llm_usage import NodeUsage
from orchestrator.telemetry.metric_catalogue import Metric
from orchestrator.telemetry.prometheus import PROJECTOR_METRICS, MetricsSink, ProjectorMetrics
from orchestrator.telemetry.workflow_metrics import MetricUpdate, StateClock, batch_updates

WF = "order-1"


def events(*items: tuple[int, Any]) -> list[Envelope[Any]]:
    """Envelopes of ``(recorded_at, payload)`` with seq 1, 2, ..."""
    return [
        Envelope(f"m{i}", WF, "r1", i, type(p).__name__, at, p)
        for i, (at, p) in enumerate(items, start=1)
    ]


def lines(envs: list[Envelope[Any]]) -> list[str]:
    return [fast_json.dumps(history_entry(e)) for e in envs]


def state(status: WorkflowStatus = WorkflowStatus.RUNNING, **kw: Any) -> WorkflowState:
    kw.setdefault("current_state", "b")
    return WorkflowState(WF, "r1", "pay", 1, "d", "{}", status=status, started_at=1_000, **kw)


def act(aid: str, kind: str, status: ActivityStatus, cls: str | None = None) -> ActivityState:
    return ActivityState(
        aid, kind, "s", "a", 1, "{}", 1, 1, "k", status=status, failure_class=cls
    )  # fmt: skip


def totals(updates: list[MetricUpdate]) -> dict[tuple[Metric, tuple[str, ...]], float]:
    """Counter sums and histogram observation lists, by metric and labels."""
    out: dict[tuple[Metric, tuple[str, ...]], Any] = {}
    for u in updates:
        key = (u.metric, u.labels)
        if u.metric.endswith("_seconds"):
            out.setdefault(key, []).append(u.value)
        else:
            out[key] = out.get(key, 0) + u.value
    return out


def scheduled(aid: str, kind: str, attempt: int) -> ActivityScheduled:
    return ActivityScheduled(aid, kind, "s", "{}", 1, attempt, "k")


RETRIED_RUN = events(
    (1_000, WorkflowStarted("pay", 1, "d", "{}")),
    (1_000, StateEntered("a", 1)),
    (1_100, scheduled("a#1/charge", "charge", 1)),
    (1_200, ActivityFailed("a#1/charge", 1, "transient", "IOError", "down")),
    (1_300, TimerFired("retry")),
    (1_400, scheduled("a#1/charge", "charge", 2)),
    (1_500, ActivityCompleted("a#1/charge", 2, '{"ok": true}')),
    (3_500, StateEntered("b", 1)),
    (4_000, WorkflowCompleted('{"ok": true}')),
)
DONE = state(
    WorkflowStatus.COMPLETED,
    activities={"a#1/charge": act("a#1/charge", "charge", ActivityStatus.COMPLETED, "transient")},
)


def test_a_retried_run_that_completes() -> None:
    got = totals(batch_updates({WF: (DONE, RETRIED_RUN, None)}, StateClock()))
    assert got == {
        (Metric.WORKFLOWS_STARTED, ("pay",)): 1,
        (Metric.ACTIVITY_ATTEMPTS, ("pay", "charge")): 2,
        (Metric.ACTIVITY_FAILURES, ("pay", "charge", "transient")): 1,
        (Metric.ACTIVITY_RETRIES, ("pay", "charge", "transient")): 1,
        (Metric.STATE_SECONDS, ("pay", "a")): [2.5],
        (Metric.STATE_SECONDS, ("pay", "b")): [0.5],
        (Metric.WORKFLOWS_FINISHED, ("pay", "completed", "none")): 1,
        (Metric.DURATION_SECONDS, ("pay", "completed")): [3.0],
    }


def test_history_lines_count_as_their_envelopes() -> None:
    from_envelopes = batch_updates({WF: (DONE, RETRIED_RUN, None)}, StateClock())
    from_lines = batch_updates({WF: (DONE, lines(RETRIED_RUN), None)}, StateClock())
    assert from_lines == from_envelopes
    assert len(from_lines) == 9


@pytest.mark.parametrize("cut", [1, 2, 4, 7, 8])
def test_batches_split_anywhere_count_the_same(cut: int) -> None:
    clock = StateClock()
    running = state(current_state="a")
    first = batch_updates({WF: (running, lines(RETRIED_RUN[:cut]), None)}, clock)
    second = batch_updates({WF: (DONE, lines(RETRIED_RUN[cut:]), "running")}, clock)
    whole = batch_updates({WF: (DONE, RETRIED_RUN, None)}, StateClock())
    assert totals(first + second) == totals(whole)


def test_a_state_whose_entry_this_process_did_not_see_is_untimed_not_guessed() -> None:
    clock = StateClock()  # a restarted projector: the run entered "a" before it
    got = totals(batch_updates({WF: (DONE, lines(RETRIED_RUN[2:]), "running")}, clock))
    assert got[(Metric.STATE_UNTIMED, ("pay",))] == 1
    assert (Metric.STATE_SECONDS, ("pay", "a")) not in got
    assert got[(Metric.STATE_SECONDS, ("pay", "b"))] == [0.5]
    assert len(clock) == 0  # the run ended: forgotten


def test_the_clock_is_bounded() -> None:
    clock = StateClock(size=2)
    for wf in ("w1", "w2", "w3"):
        clock.enter(wf, "a", 1)
    assert len(clock) == 2
    assert clock.leave("w1") is None
    assert clock.leave("w3") == ("a", 1)


def test_a_permanent_failure_is_counted_by_cause() -> None:
    history = events(
        (1_000, WorkflowStarted("pay", 1, "d", "{}")),
        (1_000, StateEntered("a", 1)),
        (1_000, scheduled("a#1/charge", "charge", 1)),
        (1_250, ActivityFailed("a#1/charge", 1, "permanent", "Declined", "no")),
        (1_250, WorkflowFailed("declined")),
    )
    failed = state(
        WorkflowStatus.FAILED,
        activities={"a#1/charge": act("a#1/charge", "charge", ActivityStatus.FAILED, "permanent")},
    )
    got = totals(batch_updates({WF: (failed, history, None)}, StateClock()))
    assert got[(Metric.WORKFLOWS_FINISHED, ("pay", "failed", "activity_permanent"))] == 1
    assert got[(Metric.ACTIVITY_FAILURES, ("pay", "charge", "permanent"))] == 1
    assert got[(Metric.DURATION_SECONDS, ("pay", "failed"))] == [0.25]
    assert (Metric.ACTIVITY_RETRIES, ("pay", "charge", "permanent")) not in got


@pytest.mark.parametrize(
    ("acts", "tasks", "cause"),
    [
        ({"x": act("x", "t", ActivityStatus.DEAD_LETTERED, "transient")}, {}, "activity_retries_exhausted"),
        ({"x": act("x", "t", ActivityStatus.FAILED, "unknown")}, {}, "activity_unknown"),
        ({}, {"h": "rejected"}, "human_task"),
        ({}, {}, "definition"),
    ],
)  # fmt: skip
def test_failure_causes(acts: dict[str, ActivityState], tasks: dict[str, str], cause: str) -> None:
    human = {t: _task(t, HumanTaskStatus.REJECTED, decision=d) for t, d in tasks.items()}
    failed = state(WorkflowStatus.FAILED, activities=acts, human_tasks=human)
    got = batch_updates(
        {WF: (failed, events((2_000, WorkflowFailed("x"))), "running")}, StateClock()
    )
    finished = [u for u in got if u.metric == Metric.WORKFLOWS_FINISHED]
    assert finished == [MetricUpdate(Metric.WORKFLOWS_FINISHED, ("pay", "failed", cause), 1)]


def test_a_compensation_counts_its_attempts_and_outcomes() -> None:
    history = events(
        (5_000, CompensationStarted("failed", "declined", '["a#1/book", "a#1/hold"]')),
        (5_000, scheduled("a#1/book/undo", "cancel_booking", 1)),
        (5_100, ActivityCompleted("a#1/book/undo", 1, "null")),
        (5_100, scheduled("a#1/hold/undo", "release_hold", 1)),
        (5_200, ActivityFailed("a#1/hold/undo", 1, "permanent", "Gone", "no")),
        (5_200, CompensationFailed("a#1/hold/undo", "gone")),
        (5_300, WorkflowCompensated("declined")),
    )
    done = state(WorkflowStatus.COMPENSATED, compensation=CompensationState("failed", "declined"))
    got = totals(batch_updates({WF: (done, lines(history), "compensating")}, StateClock()))
    assert got == {
        (Metric.COMPENSATIONS_STARTED, ("pay", "failed")): 1,
        (Metric.COMPENSATION_ATTEMPTS, ("pay", "cancel_booking")): 1,
        (Metric.COMPENSATION_ATTEMPTS, ("pay", "release_hold")): 1,
        (Metric.COMPENSATION_STEPS, ("pay", "cancel_booking", "succeeded")): 1,
        (Metric.COMPENSATION_STEPS, ("pay", "release_hold", "failed")): 1,
        (Metric.ACTIVITY_FAILURES, ("pay", "release_hold", "permanent")): 1,
        (Metric.STATE_UNTIMED, ("pay",)): 1,
        (Metric.WORKFLOWS_FINISHED, ("pay", "compensated", "failed")): 1,
        (Metric.DURATION_SECONDS, ("pay", "compensated")): [4.3],
    }


def test_unknown_outcomes_and_how_they_were_settled() -> None:
    history = events(
        (1_000, ActivityFailed("a#1/pay", 1, "unknown", "Timeout", "?")),
        (1_000, scheduled("a#1/pay/query/1", "pay.status", 1)),
        (1_100, ActivityCompleted("a#1/pay/query/1", 1, '{"found": false}')),
        (1_200, scheduled("a#1/pay", "pay", 2)),
        (1_300, ActivityTimedOut("a#1/pay", 2, "start_to_close")),
        (1_400, ActivityFailed("a#1/pay", 2, "unknown", "Timeout", "?")),
        (1_500, ActivityResolved("a#1/pay", "found", "the ledger has it")),
        (1_500, ActivityDeadLettered("a#1/other", 5, "E", "m")),
    )
    running = state(
        activities={
            "a#1/pay": act("a#1/pay", "pay", ActivityStatus.COMPLETED, "unknown"),
            "a#1/other": act("a#1/other", "ship", ActivityStatus.DEAD_LETTERED, "transient"),
        }
    )
    got = totals(batch_updates({WF: (running, lines(history), "running")}, StateClock()))
    assert got == {
        (Metric.ACTIVITY_FAILURES, ("pay", "pay", "unknown")): 2,
        (Metric.UNKNOWN_OUTCOMES, ("pay", "pay")): 2,
        (Metric.ACTIVITY_ATTEMPTS, ("pay", "pay.status")): 1,
        (Metric.ACTIVITY_ATTEMPTS, ("pay", "pay")): 1,
        (Metric.ACTIVITY_RETRIES, ("pay", "pay", "unknown")): 1,
        (Metric.UNKNOWN_RESOLUTIONS, ("pay", "pay", "query", "not_found")): 1,
        (Metric.UNKNOWN_RESOLUTIONS, ("pay", "pay", "operator", "found")): 1,
        (Metric.ACTIVITY_TIMEOUTS, ("pay", "pay", "start_to_close")): 1,
        (Metric.ACTIVITY_DEAD_LETTERED, ("pay", "ship")): 1,
    }


def test_a_timeout_answered_by_a_status_query_is_an_unknown_outcome_in_any_batch() -> None:
    """The timeout and its query in one batch, or the query in the next (the run's state
    then says the attempt timed out); a timeout retried without a query is no unknown."""
    history = events(
        (1_000, scheduled("a#1/pay", "pay", 1)),
        (1_300, ActivityTimedOut("a#1/pay", 1, "start_to_close")),
        (1_300, scheduled("a#1/pay/query/1", "pay.status", 1)),
        (1_400, ActivityCompleted("a#1/pay/query/1", 1, '{"found": true}')),
        (1_500, ActivityTimedOut("a#1/ship", 1, "start_to_close")),
    )
    pay = act("a#1/pay", "pay", ActivityStatus.COMPLETED, "unknown")
    running = state(activities={"a#1/pay": replace(pay, timed_out=(1,))})
    wanted = {
        (Metric.UNKNOWN_OUTCOMES, ("pay", "pay")): 1,
        (Metric.UNKNOWN_RESOLUTIONS, ("pay", "pay", "query", "found")): 1,
    }
    for split in (len(history), 2):
        clock, got = StateClock(), []
        for part in (history[:split], history[split:]):
            got += batch_updates({WF: (running, lines(part), "running")}, clock)
        outcomes = {k: v for k, v in totals(got).items() if k[0] in {m for m, _ in wanted}}
        assert outcomes == wanted, split


def _task(
    task_id: str, status: HumanTaskStatus, opened_at: int = 10_000, **kw: Any
) -> HumanTaskState:
    return HumanTaskState(
        task_id, "approval", "a", 1, "o", "r", ("r",), "e", "op", "t", opened_at, 70_000, 0,
        status=status, **kw,
    )  # fmt: skip


def _opened(task_id: str, due_at: int) -> HumanTaskOpened:
    return HumanTaskOpened(
        task_id, "approval", "o", "r", "{}", "e", "res", "arg", 1, "p", "op", due_at, 0, "t"
    )


def test_human_task_wait_and_sla_breaches() -> None:
    history = events(
        (10_000, _opened("t1", 70_000)),
        (40_000, HumanTaskDecided("t1", "approve", "alice", "", "e", "op", 40_000)),
        (50_000, _opened("t2", 60_000)),
        (61_000, HumanTaskEscalated("t2", 1, "boss", "r")),
        (90_000, HumanTaskDecided("t2", "reject", "bob", "", "e", "op", 90_000)),
        (95_000, HumanTaskExpired("t3", "reject")),
        (96_000, WorkflowCancelled("expired")),
    )
    ended = state(
        WorkflowStatus.CANCELLED,
        human_tasks={"t3": _task("t3", HumanTaskStatus.EXPIRED, opened_at=35_000)},
    )
    got = totals(batch_updates({WF: (ended, history, "waiting")}, StateClock()))
    assert got[(Metric.HUMAN_TASKS_OPENED, ("pay", "approval"))] == 2
    assert got[(Metric.HUMAN_WAIT_SECONDS, ("pay", "approval", "approve"))] == [30.0]
    assert got[(Metric.HUMAN_WAIT_SECONDS, ("pay", "approval", "reject"))] == [40.0]
    assert got[(Metric.HUMAN_WAIT_SECONDS, ("pay", "approval", "expired"))] == [60.0]
    assert got[(Metric.HUMAN_SLA_BREACHES, ("pay", "approval", "decided_late"))] == 1
    assert got[(Metric.HUMAN_SLA_BREACHES, ("pay", "approval", "escalated"))] == 1
    assert got[(Metric.HUMAN_SLA_BREACHES, ("pay", "approval", "expired"))] == 1
    cause = ("pay", "cancelled", "human_task_expired")
    assert got[(Metric.WORKFLOWS_FINISHED, cause)] == 1


def test_llm_usage_per_workflow_and_type() -> None:
    usage = NodeUsage(3, "a#1/ask", "classify", 120, 30, 0.0042, False, 2, {})
    cached = NodeUsage(4, "a#1/ask2", "classify", 0, 0, 0.0, True, 0, {})
    got = totals(batch_updates({WF: (state(), [], None)}, StateClock(), {WF: [usage, cached]}))
    labels = ("pay", "classify")
    assert got == {
        (Metric.LLM_TOKENS, (*labels, "prompt")): 120,
        (Metric.LLM_TOKENS, (*labels, "completion")): 30,
        (Metric.LLM_COST, labels): 0.0042,
        (Metric.LLM_CALLS, labels): 2,
        (Metric.LLM_NODES, labels): 2,
        (Metric.LLM_CACHE_HITS, labels): 1,
    }


def test_lines_that_move_nothing_are_not_parsed_and_bad_lines_are_skipped() -> None:
    junk = ['{"seq":1,"type":"TimerFired",NOT JSON', '{"seq":2,"type":"WorkflowStarted",oops', "x"]
    assert batch_updates({WF: (state(), junk, None)}, StateClock()) == []


def test_a_sink_applies_exact_counts_to_its_registry() -> None:
    registry = CollectorRegistry()
    metrics = ProjectorMetrics(MetricsSink(PROJECTOR_METRICS, registry, otel=False))
    metrics.record({WF: (DONE, lines(RETRIED_RUN), None)}, {})
    metrics.record({"other": (DONE, [], None)}, {})  # nothing new: nothing counted

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("keel_workflows_started_total", workflow="pay") == 1
    assert value("keel_activity_retries_total", workflow="pay", activity_type="charge",
                 failure_class="transient") == 1  # fmt: skip
    finished = {"workflow": "pay", "status": "completed", "cause": "none"}
    assert value("keel_workflows_finished_total", **finished) == 1
    assert value("keel_workflow_duration_seconds_count", workflow="pay", status="completed") == 1
    assert value("keel_workflow_duration_seconds_sum", workflow="pay", status="completed") == 3.0
    assert value("keel_workflow_state_seconds_bucket", workflow="pay", state="a", le="5.0") == 1
    assert value("keel_workflow_state_seconds_bucket", workflow="pay", state="a", le="1.0") == 0
