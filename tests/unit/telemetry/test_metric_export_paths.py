"""One instrument, two exporters: the OpenTelemetry path sees the same counts and
observations as the Prometheus registry; the gauges read on scrape wait a bounded time."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from orchestrator.telemetry.metric_catalogue import Metric
from orchestrator.telemetry.prometheus import (
    PROJECTOR_METRICS,
    CachedSource,
    KafkaGauges,
    MetricsSink,
)
from orchestrator.telemetry.workflow_metrics import MetricUpdate


def _otel_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        m.name: list(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


def test_the_otel_path_gets_the_same_updates_with_the_same_labels() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    registry = CollectorRegistry()
    sink = MetricsSink(PROJECTOR_METRICS, registry, meter=meter)
    sink.apply(
        [
            MetricUpdate(Metric.WORKFLOWS_STARTED, ("pay",), 1),
            MetricUpdate(Metric.WORKFLOWS_STARTED, ("pay",), 1),
            MetricUpdate(Metric.DURATION_SECONDS, ("pay", "completed"), 3.0),
            MetricUpdate(Metric.LLM_COST, ("pay", "classify"), 0.5),
        ]
    )
    points = _otel_points(reader)
    [started] = points["keel.workflows_started"]
    assert (started.value, dict(started.attributes)) == (2, {"workflow": "pay"})
    [took] = points["keel.workflow_duration_seconds"]
    assert (took.count, took.sum, dict(took.attributes)) == (
        1,
        3.0,
        {"workflow": "pay", "status": "completed"},
    )
    assert 5 in took.explicit_bounds  # the catalogue's buckets, not the SDK's defaults
    # the LLM counters reach OpenTelemetry as keel.llm.* (metrics.py), not twice
    assert "keel.llm_cost_usd" not in points
    assert registry.get_sample_value("keel_workflows_started_total", {"workflow": "pay"}) == 2
    cost = registry.get_sample_value(
        "keel_llm_cost_usd_total", {"workflow": "pay", "activity_type": "classify"}
    )
    assert cost == 0.5


def test_without_otlp_no_otel_instrument_is_made() -> None:
    sink = MetricsSink([Metric.WORKFLOWS_STARTED], CollectorRegistry(), otel=False)
    assert sink._otel == {}


def test_a_slow_source_is_waited_for_a_bounded_time_then_served_from_its_cache() -> None:
    release = threading.Event()
    reads: list[int] = []

    def read() -> dict[tuple[str, str], int]:
        reads.append(1)
        if len(reads) == 1:
            release.wait(10)
        return {("t", "g"): len(reads)}

    source = CachedSource("consumer_lag", read, ttl_s=0.0, timeout_s=0.2)
    began = time.monotonic()
    assert source.get() == (None, False)  # nothing yet, and not waited for past 0.2 s
    assert time.monotonic() - began < 2
    assert source.get() == (None, False)  # the slow read still runs: not started twice
    assert len(reads) == 1
    release.set()
    time.sleep(0.3)
    value, ok = source.get()  # the first read's value landed; a fresh one is read now
    assert ok and value == {("t", "g"): 2}
    assert len(reads) == 2


def test_a_failing_source_says_so_and_keeps_its_last_value() -> None:
    answers: list[Any] = [{("activity",): 3}, RuntimeError("broker away")]

    def read() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    dlq = CachedSource("dlq", read, ttl_s=0.0)
    lag = CachedSource("consumer_lag", lambda: {("t.commands", "t.orchestrator"): 7})
    gauges = KafkaGauges(lag, dlq)

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in gauges.collect()
            for s in family.samples
        }

    first = scrape()
    assert first[("keel_dlq_letters", (("kind", "activity"),))] == 3
    assert first[("keel_gauge_source_up", (("source", "dlq"),))] == 1
    lagging = ("keel_consumer_lag", (("group", "t.orchestrator"), ("topic", "t.commands")))
    assert first[lagging] == 7
    # the next scrape's read fails: the last value stays, and the source says it is down
    second = scrape()
    assert second[("keel_dlq_letters", (("kind", "activity"),))] == 3
    assert second[("keel_gauge_source_up", (("source", "dlq"),))] == 0
    assert second[("keel_gauge_source_up", (("source", "consumer_lag"),))] == 1


def test_the_multiprocess_folder_is_fresh_and_dead_processes_folders_go(tmp_path) -> None:
    from prometheus_client import values

    from orchestrator.telemetry import prometheus

    assert prometheus.MULTIPROC_VAR not in os.environ
    before = values.ValueClass
    dead = tmp_path / "metrics" / "orchestrator-999999999"
    other = tmp_path / "metrics" / "worker-999999999"
    dead.mkdir(parents=True)
    other.mkdir(parents=True)
    own = tmp_path / "metrics" / f"orchestrator-{os.getpid()}"
    own.mkdir()
    (own / "counter_1.db").write_bytes(b"old")
    try:
        path = prometheus.use_multiprocess_dir(tmp_path, "orchestrator")
        assert path == own.resolve() and list(path.iterdir()) == []
        assert not dead.exists() and other.exists()
        assert os.environ[prometheus.MULTIPROC_VAR] == str(path)
        assert values.ValueClass is not before  # the next metric made is file-backed
    finally:
        os.environ.pop(prometheus.MULTIPROC_VAR, None)
        values.ValueClass = before


def test_the_kafka_gauges_reach_otel_as_observable_gauges() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    lag = CachedSource("consumer_lag", lambda: {("t.commands", "t.orchestrator"): 4})
    dlq = CachedSource("dlq", lambda: {("activity",): 2, ("record",): 0})
    KafkaGauges(lag, dlq).register_otel(meter)
    points = _otel_points(reader)
    [backlog] = points["keel.consumer_lag"]
    assert (backlog.value, dict(backlog.attributes)) == (
        4,
        {"topic": "t.commands", "group": "t.orchestrator"},
    )
    letters = {p.attributes["kind"]: p.value for p in points["keel.dlq_letters"]}
    assert letters == {"activity": 2, "record": 0}
