"""The one count of unknown outcomes and their settlements
(``orchestrator.domain.history.unknown_outcomes``), pinned on the recorded corpus and on histories
the decider writes: a timeout is unknown only when the engine answered it with a status
query, each attempt counts once, and only a ``found`` true/false answer or an operator
settles one."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from orchestrator.client.history_io import read_history_file
from orchestrator.domain.history.unknown_outcomes import (
    OutcomeFold,
    Settled,
    SettledBy,
    Unknown,
    outcomes_of,
    query_parent,
)
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    ActivityTimedOut,
    CompleteActivity,
    Envelope,
    FailActivity,
)
from tests.unit.domain.test_activity_failures import PAY, QUERY, Harness

CORPUS = Path(__file__).resolve().parents[2] / "histories"

#: (unknown, settled by query, settled by an operator) of each recorded run that has any.
PINNED = {
    ("attention.jsonl", "invoice-unknown-resolved"): (1, 0, 1),
    ("fan_out.jsonl", "batch-fan-out"): (1, 1, 0),
    ("invoices.jsonl", "invoice-unknown-found"): (1, 1, 0),
}


def corpus_runs() -> dict[tuple[str, str], list[Envelope[Any]]]:
    runs: dict[tuple[str, str], list[Envelope[Any]]] = defaultdict(list)
    for path in sorted(CORPUS.glob("*.jsonl")):
        for env in read_history_file(path):
            runs[(path.name, env.workflow_id)].append(env)
    return runs


def counts(fold: OutcomeFold) -> tuple[int, int, int]:
    return fold.unknown, fold.settled[SettledBy.QUERY], fold.settled[SettledBy.OPERATOR]


def test_the_corpus_counts_as_pinned() -> None:
    runs = corpus_runs()
    got = {run: counts(outcomes_of(envs)) for run, envs in runs.items()}
    assert {run: n for run, n in got.items() if n != (0, 0, 0)} == PINNED
    # the two timeouts of timeouts.jsonl are retried under the same key: no unknown outcome
    timed_out = [
        e for (f, _), envs in runs.items() if f == "timeouts.jsonl" for e in envs
        if isinstance(e.payload, ActivityTimedOut)
    ]  # fmt: skip
    assert len(timed_out) == 2


def test_a_timeout_answered_by_a_status_query_is_unknown_and_settled() -> None:
    h = Harness()
    h.start("queried")
    h.fire(f"{PAY}/timeout/start_to_close/1")
    h.send(CompleteActivity(PAY, 1, '{"receipt": "late"}'))  # dropped: the query decides
    h.send(CompleteActivity(QUERY, 1, '{"found": true, "result": {"receipt": "r1"}}'))
    fold = OutcomeFold()
    noted = [n for n in (fold.add(e.payload) for e in h.history) if n is not None]
    assert noted == [Unknown(PAY, 1), Settled(PAY, SettledBy.QUERY, "found")]
    assert counts(fold) == (1, 1, 0)


def test_a_timeout_without_a_status_query_is_a_retry() -> None:
    h = Harness()
    h.start("closing")
    h.fire(f"{PAY}/timeout/start_to_close/1")
    assert any(isinstance(e.payload, ActivityTimedOut) for e in h.history)
    assert counts(outcomes_of(h.history)) == (0, 0, 0)


def test_a_query_that_answers_neither_settles_nothing() -> None:
    h = Harness()
    h.start("queried")
    h.send(FailActivity(PAY, 1, "unknown", "ConnectionReset", "after send"))
    h.send(CompleteActivity(QUERY, 1, '{"found": "perhaps"}'))
    assert counts(outcomes_of(h.history)) == (1, 0, 0)


def test_a_late_report_after_the_timeout_counts_once() -> None:
    """Older histories recorded the lost answer's report after the timeout fired."""
    fold = OutcomeFold()
    for p in (
        ActivityScheduled(PAY, "charge", "pay", "{}", 1, 1, "k"),
        ActivityTimedOut(PAY, 1, "start_to_close"),
        ActivityScheduled(QUERY, "charge_status", "pay", "{}", 1, 1, "q"),
        ActivityFailed(PAY, 1, "unknown", "ConnectionReset", "late"),
        ActivityCompleted(QUERY, 1, '{"found": false}'),
    ):
        fold.add(p)
    assert counts(fold) == (1, 1, 0)


def test_a_fold_that_starts_mid_history_asks_about_earlier_timeouts() -> None:
    query = ActivityScheduled(QUERY, "charge_status", "pay", "{}", 1, 1, "q")
    assert OutcomeFold().add(query) is None
    earlier = OutcomeFold(timed_out_before=lambda aid, n: (aid, n) == (PAY, 1))
    assert earlier.add(query) == Unknown(PAY, 1)
    # a retry of the query itself is not a second unknown outcome
    assert earlier.add(ActivityScheduled(QUERY, "charge_status", "pay", "{}", 1, 2, "q")) is None


@pytest.mark.parametrize(
    ("activity_id", "parent"),
    [
        ("run#1/pay/query/2", "run#1/pay"),
        ("post#1/post[1]/query/1", "post#1/post[1]"),
        ("run#1/pay", None),
        ("run#1/pay/undo", None),
    ],
)
def test_query_parent(activity_id: str, parent: str | None) -> None:
    assert query_parent(activity_id) == parent
