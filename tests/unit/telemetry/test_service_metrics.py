"""A process's metrics are an object its composition root makes and hands down, not a
module's (issue 45, item 1): two in one process count apart, and a projector's counts are
kept only once someone serves them (docs/metrics.md)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from orchestrator.domain.model.messages import CompleteActivity, FailActivity
from orchestrator.telemetry.prometheus import ServiceMetrics
from tests.unit.telemetry.test_workflow_metrics import DONE, RETRIED_RUN, WF, lines


def test_two_service_metrics_count_apart() -> None:
    a, b = ServiceMetrics(CollectorRegistry()), ServiceMetrics(CollectorRegistry())
    a.worker.task_done("charge", CompleteActivity("run#1/x", 1, "{}"), 0.01)
    a.worker.task_done("charge", FailActivity("run#1/x", 2, "transient", "E", "m"), 0.02)
    done = {"activity_type": "charge", "outcome": "completed"}
    failed = {"activity_type": "charge", "outcome": "transient"}
    assert a.registry is not None and b.registry is not None
    assert a.registry.get_sample_value("keel_worker_tasks_total", done) == 1
    assert a.registry.get_sample_value("keel_worker_tasks_total", failed) == 1
    assert b.registry.get_sample_value("keel_worker_tasks_total", done) is None


@pytest.mark.parametrize("served", [False, True])
def test_a_projectors_counts_are_kept_once_served(served: bool, monkeypatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", raising=False)
    metrics = ServiceMetrics(CollectorRegistry())
    if served:
        metrics.serve(0)
    metrics.projector.record({WF: (DONE, lines(RETRIED_RUN), None)}, {})
    assert metrics.registry is not None
    started = metrics.registry.get_sample_value("keel_workflows_started_total", {"workflow": "pay"})
    assert started == (1 if served else None)
