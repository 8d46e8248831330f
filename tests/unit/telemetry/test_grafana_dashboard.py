"""ops/grafana/keel.json charts only what Keel exports: every metric an expression names
is in a registry holding all of Keel's instruments, and every label it groups by is a
label of a metric of that expression."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from orchestrator.telemetry.metric_catalogue import SPECS, Kind
from orchestrator.telemetry.prometheus import (
    PROJECTOR_METRICS,
    WORKER_METRICS,
    CachedSource,
    KafkaGauges,
    MetricsSink,
)

DASHBOARD = Path(__file__).parents[3] / "ops" / "grafana" / "keel.json"
_METRIC = re.compile(r"\bkeel_[a-z_]+")
_BY = re.compile(r"\bby \(([^)]*)\)")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exposed() -> dict[str, set[str]]:
    """Every sample name the registry exposes, with its labels."""
    registry = CollectorRegistry()
    MetricsSink([*PROJECTOR_METRICS, *WORKER_METRICS], registry, otel=False)
    lag = CachedSource("consumer_lag", lambda: {("t", "g"): 1})
    dlq = CachedSource("dlq", lambda: {("activity",): 0})
    registry.register(KafkaGauges(lag, dlq))
    names: dict[str, set[str]] = {}
    for family in registry.collect():
        labels = set(SPECS[family.name].labels) if family.name in SPECS else {"source"}
        for suffix in _SUFFIXES[family.type]:
            names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return names


def expressions() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    found = [t["expr"] for p in board["panels"] for t in p["targets"]]
    found += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    return found


def test_every_metric_the_dashboard_reads_is_exported() -> None:
    names = exposed()
    used = {m for e in expressions() for m in _METRIC.findall(e)}
    assert used - set(names) == set()
    # the panels the dashboard promises are there, and read what they say
    assert {m for m in used if m.endswith("_total")} >= {
        "keel_workflows_started_total",
        "keel_workflows_finished_total",
        "keel_activity_retries_total",
        "keel_activity_unknown_outcomes_total",
        "keel_human_task_sla_breaches_total",
        "keel_compensation_steps_total",
        "keel_llm_cost_usd_total",
    }
    assert {"keel_consumer_lag", "keel_dlq_letters", "keel_workflow_state_seconds_bucket",
            "keel_workflow_duration_seconds_bucket", "keel_human_task_wait_seconds_bucket"} <= used  # fmt: skip


def test_every_label_the_dashboard_groups_by_belongs_to_its_metrics() -> None:
    names = exposed()
    for expr in expressions():
        labels = set().union(*(names[m] for m in _METRIC.findall(expr)))
        for group in _BY.findall(expr):
            wanted = {x.strip() for x in group.split(",")}
            assert wanted <= labels, f"{expr}: {wanted - labels}"


def test_the_registry_knows_every_instrument_of_the_catalogue() -> None:
    names = exposed()
    for metric, spec in SPECS.items():
        assert metric + _SUFFIXES[spec.kind][0] in names, metric
    assert sum(spec.kind is Kind.GAUGE for spec in SPECS.values()) == 3
