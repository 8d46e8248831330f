"""``keel demo``, ``keel evaluate``, the invoice demo and the metrics count unknown
outcomes and their settlements alike: each agrees with the one history fold on every
recorded run (tests/histories), the ones that hold unknown outcomes included."""

from __future__ import annotations

from typing import Any

import pytest

from ops.demo_checks import Expectation, Kind, check
from ops.evaluation.run_evidence import evidence_of
from ops.invoices.invoice_report import Books, find
from orchestrator.domain.history.unknown_outcomes import SettledBy, outcomes_of
from orchestrator.domain.model.messages import Envelope
from orchestrator.domain.model.state import WorkflowState
from orchestrator.records import fast_json
from orchestrator.records.history_entries import history_entry
from orchestrator.telemetry.metric_catalogue import Metric
from orchestrator.telemetry.workflow_metrics import StateClock, batch_updates
from tests.unit.domain.test_history_outcomes import PINNED, corpus_runs

RUNS = corpus_runs()
WITH_OUTCOMES = sorted(PINNED)


def events_of(run: tuple[str, str]) -> list[Envelope[Any]]:
    return [e for e in RUNS[run] if e.payload.KIND == "event"]


def test_the_corpus_has_unknown_outcomes_settled_both_ways() -> None:
    by = {k for run in WITH_OUTCOMES for k, n in outcomes_of(RUNS[run]).settled.items() if n}
    assert by == {SettledBy.QUERY, SettledBy.OPERATOR}


@pytest.mark.parametrize("run", sorted(RUNS), ids="/".join)
def test_every_report_agrees_with_the_fold(run: tuple[str, str]) -> None:
    wf, envs = run[1], RUNS[run]
    fold = outcomes_of(envs)
    by_query = fold.settled[SettledBy.QUERY]

    ev = evidence_of(wf, envs)
    assert (ev.unknown, ev.settled_by_query) == (fold.unknown, by_query)

    books = Books({"postings": [], "effects": {}}, {"payments": {}, "effects": {}})
    invoice = find({wf: envs}, {wf: "any"}, books)
    assert (invoice.unknown, invoice.settled_by_query) == (fold.unknown, by_query)

    demo = check({wf: envs}, {wf: Expectation(Kind.CHECKS)}, {"postings": [], "effects": {}})
    assert (demo.unknown_outcomes, demo.reconciled_by_query) == (fold.unknown, by_query)
    assert demo.reconciled_runs == ([wf] if by_query else [])


@pytest.mark.parametrize("run", WITH_OUTCOMES, ids="/".join)
@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_the_metrics_agree_with_the_fold_in_batches_of_any_size(
    run: tuple[str, str], batch: int
) -> None:
    """The projector folds a run in committed batches; the counts do not depend on them."""
    events = events_of(run)
    fold = outcomes_of(events)
    state = WorkflowState(run[1], "r", "invoice", 1, "d", "{}")
    clock, updates = StateClock(), []
    for at in range(0, len(events), batch):
        lines = [fast_json.dumps(history_entry(e)) for e in events[at : at + batch]]
        updates += batch_updates({run[1]: (state, lines, None)}, clock)
    unknown = sum(u.value for u in updates if u.metric == Metric.UNKNOWN_OUTCOMES)
    settled = [u.labels[2:] for u in updates if u.metric == Metric.UNKNOWN_RESOLUTIONS]
    assert unknown == fold.unknown
    assert len(settled) == fold.settled_total
    assert {by for by, _ in settled} == {k for k, n in fold.settled.items() if n}
