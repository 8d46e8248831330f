"""Every metric Keel exports, defined once: name, type, labels, help, unit and buckets
(docs/metrics.md lists them for operators; ``ops/grafana/keel.json`` charts them).

:mod:`~orchestrator.telemetry.prometheus` creates each in a prometheus-client registry and,
when an OTLP endpoint is set, on the OpenTelemetry meter; :mod:`~orchestrator.telemetry.
workflow_metrics` says which folded event moves which.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["LONG_BUCKETS", "QUICK_BUCKETS", "SPECS", "Kind", "Metric", "MetricSpec"]


class Kind(StrEnum):
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    GAUGE = "gauge"


class Metric(StrEnum):
    """Every metric's Prometheus name (a counter is exposed with ``_total`` added)."""

    WORKFLOWS_STARTED = "keel_workflows_started"
    WORKFLOWS_FINISHED = "keel_workflows_finished"
    WORKFLOWS_CONTINUED = "keel_workflows_continued_as_new"
    STATE_SECONDS = "keel_workflow_state_seconds"
    STATE_UNTIMED = "keel_workflow_state_untimed"
    DURATION_SECONDS = "keel_workflow_duration_seconds"
    ACTIVITY_ATTEMPTS = "keel_activity_attempts"
    ACTIVITY_RETRIES = "keel_activity_retries"
    ACTIVITY_FAILURES = "keel_activity_failures"
    ACTIVITY_TIMEOUTS = "keel_activity_timeouts"
    ACTIVITY_DEAD_LETTERED = "keel_activity_dead_lettered"
    UNKNOWN_OUTCOMES = "keel_activity_unknown_outcomes"
    UNKNOWN_RESOLUTIONS = "keel_activity_unknown_resolutions"
    HUMAN_TASKS_OPENED = "keel_human_tasks_opened"
    HUMAN_WAIT_SECONDS = "keel_human_task_wait_seconds"
    HUMAN_SLA_BREACHES = "keel_human_task_sla_breaches"
    COMPENSATIONS_STARTED = "keel_compensations_started"
    COMPENSATION_ATTEMPTS = "keel_compensation_attempts"
    COMPENSATION_STEPS = "keel_compensation_steps"
    LLM_TOKENS = "keel_llm_tokens"
    LLM_COST = "keel_llm_cost_usd"
    LLM_CALLS = "keel_llm_calls"
    LLM_NODES = "keel_llm_nodes"
    LLM_CACHE_HITS = "keel_llm_cache_hits"
    # measured by the worker (each attempt it ran; at least once)
    WORKER_TASKS = "keel_worker_tasks"
    WORKER_TASK_SECONDS = "keel_worker_task_seconds"
    # read from Kafka on scrape (the orchestrator's endpoint)
    CONSUMER_LAG = "keel_consumer_lag"
    DLQ_LETTERS = "keel_dlq_letters"
    GAUGE_SOURCE_UP = "keel_gauge_source_up"


#: Histogram buckets, in seconds: a step takes milliseconds, a person days.
QUICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
LONG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400, 604800)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One instrument, defined once for both exporters (Prometheus and OpenTelemetry).

    ``otel``: also exported through OpenTelemetry (the LLM counters are not: the
    OpenTelemetry path has had them as ``keel.llm.*`` since before this catalogue,
    ``orchestrator/telemetry/metrics.py``).
    """

    kind: Kind
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    buckets: tuple[float, ...] = ()
    otel: bool = True

    def otel_name(self, metric: Metric) -> str:
        return "keel." + metric.removeprefix("keel_")


_C, _H, _G = Kind.COUNTER, Kind.HISTOGRAM, Kind.GAUGE
_WF = ("workflow",)
_ACT = ("workflow", "activity_type")

SPECS: dict[Metric, MetricSpec] = {
    Metric.WORKFLOWS_STARTED: MetricSpec(_C, "Runs started.", _WF, "{run}"),
    Metric.WORKFLOWS_FINISHED: MetricSpec(
        _C, "Runs ended, by terminal status and cause.", (*_WF, "status", "cause"), "{run}"
    ),
    Metric.WORKFLOWS_CONTINUED: MetricSpec(_C, "Runs continued as new.", _WF, "{run}"),
    Metric.STATE_SECONDS: MetricSpec(
        _H,
        "Time a run spent in a state, observed when it left it.",
        (*_WF, "state"),
        "s",
        LONG_BUCKETS,
    ),
    Metric.STATE_UNTIMED: MetricSpec(
        _C, "State exits whose entry this process had not seen (not timed).", _WF, "{exit}"
    ),
    Metric.DURATION_SECONDS: MetricSpec(
        _H, "A run's start to its end.", (*_WF, "status"), "s", LONG_BUCKETS
    ),
    Metric.ACTIVITY_ATTEMPTS: MetricSpec(_C, "Activity attempts dispatched.", _ACT, "{attempt}"),
    Metric.ACTIVITY_RETRIES: MetricSpec(
        _C,
        "Attempts after the first, by the class of the failure before.",
        (*_ACT, "failure_class"),
        "{attempt}",
    ),
    Metric.ACTIVITY_FAILURES: MetricSpec(
        _C, "Failed attempts by failure class.", (*_ACT, "failure_class"), "{attempt}"
    ),
    Metric.ACTIVITY_TIMEOUTS: MetricSpec(
        _C, "Attempts that timed out, by timeout.", (*_ACT, "timeout"), "{attempt}"
    ),
    Metric.ACTIVITY_DEAD_LETTERED: MetricSpec(
        _C, "Activities out of retries, parked for an operator.", _ACT, "{activity}"
    ),
    Metric.UNKNOWN_OUTCOMES: MetricSpec(
        _C,
        "Attempts whose outcome is unknown (a write may or may not have happened).",
        _ACT,
        "{attempt}",
    ),
    Metric.UNKNOWN_RESOLUTIONS: MetricSpec(
        _C,
        "Unknown outcomes settled: by a status query or an operator, and how.",
        (*_ACT, "by", "resolution"),
        "{resolution}",
    ),
    Metric.HUMAN_TASKS_OPENED: MetricSpec(_C, "Human tasks opened.", (*_WF, "task"), "{task}"),
    Metric.HUMAN_WAIT_SECONDS: MetricSpec(
        _H,
        "A human task's open to its decision or expiry.",
        (*_WF, "task", "outcome"),
        "s",
        LONG_BUCKETS,
    ),
    Metric.HUMAN_SLA_BREACHES: MetricSpec(
        _C,
        "Human tasks past their SLA: decided after due, escalated, expired.",
        (*_WF, "task", "kind"),
        "{breach}",
    ),
    Metric.COMPENSATIONS_STARTED: MetricSpec(
        _C, "Runs that began compensating, by cause.", (*_WF, "cause"), "{run}"
    ),
    Metric.COMPENSATION_ATTEMPTS: MetricSpec(
        _C, "Compensation attempts dispatched.", _ACT, "{attempt}"
    ),
    Metric.COMPENSATION_STEPS: MetricSpec(
        _C,
        "Compensations settled: succeeded or failed (given up).",
        (*_ACT, "outcome"),
        "{compensation}",
    ),
    Metric.LLM_TOKENS: MetricSpec(_C, "Model tokens.", (*_ACT, "kind"), "{token}", otel=False),
    Metric.LLM_COST: MetricSpec(_C, "Model cost in USD.", _ACT, "USD", otel=False),
    Metric.LLM_CALLS: MetricSpec(_C, "Model calls.", _ACT, "{call}", otel=False),
    Metric.LLM_NODES: MetricSpec(_C, "Completed LLM nodes.", _ACT, "{node}", otel=False),
    Metric.LLM_CACHE_HITS: MetricSpec(
        _C, "LLM nodes answered from the cache.", _ACT, "{hit}", otel=False
    ),
    Metric.WORKER_TASKS: MetricSpec(
        _C,
        "Tasks a worker ran, by outcome (completed or the failure class).",
        ("activity_type", "outcome"),
        "{task}",
    ),
    Metric.WORKER_TASK_SECONDS: MetricSpec(
        _H,
        "A task's run in the worker, handler and report.",
        ("activity_type",),
        "s",
        QUICK_BUCKETS,
    ),
    Metric.CONSUMER_LAG: MetricSpec(
        _G,
        "Records not yet committed by a consumer group (backlog).",
        ("topic", "group"),
        "{record}",
    ),
    Metric.DLQ_LETTERS: MetricSpec(
        _G, "Dead letters not yet redriven or discarded, by kind.", ("kind",), "{letter}"
    ),
    Metric.GAUGE_SOURCE_UP: MetricSpec(
        _G, "1 when the last read of a gauge source answered in time, else 0.", ("source",)
    ),
}
