"""Keel's metrics exported: a Prometheus ``/metrics`` endpoint per service, and the same
instruments through OpenTelemetry when ``OTEL_EXPORTER_OTLP_*`` is set (docs/metrics.md).

Each instrument is defined once, in :data:`~orchestrator.telemetry.metric_catalogue.SPECS`;
a :class:`MetricsSink` creates it in a prometheus-client registry and, when an OTLP
endpoint is configured, on the OpenTelemetry meter too, and applies every update to both.

The orchestrator's projector is a child process by default (``keel projector
--feed-fd``): the orchestrator then runs in prometheus-client's multiprocess mode
(:func:`use_multiprocess_dir`, before prometheus-client is first imported), the child
writes its counters to files there, and the orchestrator's endpoint sums them, so one
scrape of the orchestrator shows the workflow metrics and a restarted child loses no count.
Gauges read from Kafka (consumer lag, dead letters) are computed on scrape through
:class:`CachedSource`: a short cache, and a bounded wait past which the last values are
served and ``keel_gauge_source_up`` says 0.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import Metric as PromMetric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from orchestrator.domain.model.messages import Envelope, FailActivity
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import ActivityStatus
from orchestrator.records.llm_usage import NodeUsage
from orchestrator.telemetry.metric_catalogue import SPECS, Kind, Metric
from orchestrator.telemetry.metrics import ENDPOINT_VARS, LlmMetrics
from orchestrator.telemetry.workflow_metrics import MetricUpdate, StateClock, batch_updates

__all__ = [
    "CachedSource",
    "KafkaGauges",
    "MetricsSink",
    "ProjectorMetrics",
    "ServiceMetrics",
    "use_multiprocess_dir",
]

log = logging.getLogger("keel.metrics")

#: prometheus-client's switch to multiprocess mode (read when it is first imported).
MULTIPROC_VAR = "PROMETHEUS_MULTIPROC_DIR"
OTEL_METER = "keel.workflows"

#: The metrics the projector records (events folded once) and the worker measures.
PROJECTOR_METRICS = tuple(
    m
    for m, spec in SPECS.items()
    if spec.kind is not Kind.GAUGE and not m.startswith("keel_worker_")
)
WORKER_METRICS = (Metric.WORKER_TASKS, Metric.WORKER_TASK_SECONDS)


def otel_enabled() -> bool:
    """Whether the OpenTelemetry path is on (an OTLP endpoint variable is set)."""
    return any(os.environ.get(v) for v in ENDPOINT_VARS)


class MetricsSink:
    """Instruments of ``wanted`` in ``registry`` (and on the OpenTelemetry meter when
    ``otel``); :meth:`apply` moves both. ``registry=None``: prometheus-client's default
    one (what a service serves, or, in multiprocess mode, files its parent sums);
    ``meter``: the OpenTelemetry meter (the global provider's when OTLP is on)."""

    def __init__(
        self,
        wanted: Iterable[Metric],
        registry: CollectorRegistry | None = None,
        otel: bool | None = None,
        meter: Meter | None = None,
    ) -> None:
        from prometheus_client import REGISTRY

        self.registry = registry if registry is not None else REGISTRY
        self._prom: dict[Metric, Any] = {}
        self._otel: dict[Metric, Any] = {}
        if meter is None and (otel_enabled() if otel is None else otel):
            meter = otel_metrics.get_meter(OTEL_METER)
        for metric in wanted:
            spec = SPECS[metric]
            if spec.kind is Kind.COUNTER:
                self._prom[metric] = Counter(metric, spec.help, spec.labels, registry=self.registry)
            elif spec.kind is Kind.HISTOGRAM:
                self._prom[metric] = Histogram(
                    metric, spec.help, spec.labels, registry=self.registry, buckets=spec.buckets
                )
            else:
                raise ValueError(f"{metric} is a gauge: it is read on scrape, not recorded")
            if meter is None or not spec.otel:
                continue
            name = spec.otel_name(metric)
            if spec.kind is Kind.COUNTER:
                self._otel[metric] = meter.create_counter(name, spec.unit, spec.help)
            else:
                self._otel[metric] = meter.create_histogram(
                    name, spec.unit, spec.help, explicit_bucket_boundaries_advisory=spec.buckets
                )

    def apply(self, updates: Iterable[MetricUpdate]) -> None:
        """Move both exporters' instruments; a batch's counter updates are summed per
        label set first (one call each), a histogram's observations go one by one."""
        sums: dict[tuple[Metric, tuple[str, ...]], float] = {}
        for u in updates:
            if u.metric not in self._prom:
                continue
            if SPECS[u.metric].kind is Kind.COUNTER:
                key = (u.metric, u.labels)
                sums[key] = sums.get(key, 0) + u.value
            else:
                self._move(u.metric, u.labels, u.value)
        for (metric, labels), total in sums.items():
            self._move(metric, labels, total)

    def _move(self, metric: Metric, labels: tuple[str, ...], value: float) -> None:
        counter = SPECS[metric].kind is Kind.COUNTER
        child = self._prom[metric].labels(*labels)
        if counter:
            child.inc(value)
        else:
            child.observe(value)
        otel = self._otel.get(metric)
        if otel is not None:
            attrs = dict(zip(SPECS[metric].labels, labels, strict=True))
            if counter:
                otel.add(value, attrs)
            else:
                otel.record(value, attrs)


Updates = Mapping[str, tuple[WorkflowState, Sequence[Envelope[Any] | str], str | None]]


class ProjectorMetrics:
    """What a live projector records after each committed write, while ``enabled``
    (metrics served, or exported: a projector nobody reads the metrics of spends nothing
    on them)."""

    def __init__(
        self, sink: MetricsSink, clock: StateClock | None = None, enabled: bool = True
    ) -> None:
        self.sink = sink
        self.clock = clock or StateClock()
        self.enabled = enabled
        self._lock = threading.Lock()  # one clock, should two projectors share a process

    def record(self, updates: Updates, usages: Mapping[str, list[NodeUsage]]) -> None:
        """Never raises: a metric must not stop the projector (the write has committed)."""
        if not self.enabled:
            return
        try:
            with self._lock:
                self.sink.apply(batch_updates(updates, self.clock, usages))
        except Exception:
            log.exception("metrics of a projected batch not recorded")


class WorkerMetrics:
    """What a worker measures of each task it ran (at least once: a task delivered again
    after a crash runs, and counts, again)."""

    def __init__(self, sink: MetricsSink) -> None:
        self.sink = sink

    def task_done(self, activity_type: str, report: object, seconds: float) -> None:
        """One task run: ``report`` is what the worker sends (a ``FailActivity`` counts
        by its failure class, anything else as completed)."""
        outcome = (
            report.failure_class
            if isinstance(report, FailActivity)
            else str(ActivityStatus.COMPLETED)
        )
        self.sink.apply(
            [
                MetricUpdate(Metric.WORKER_TASKS, (activity_type, outcome), 1),
                MetricUpdate(Metric.WORKER_TASK_SECONDS, (activity_type,), seconds),
            ]
        )


class ServiceMetrics:
    """A process's metrics, made once by its composition root (orchestrator/cli/services.py)
    and handed to the parts that count: the projector's read-model writes and LLM usage,
    the worker's tasks. Each set is created on first use in ``registry`` (prometheus-client's
    default one, what the process serves, or in multiprocess mode the files its parent sums).
    Projector counts are kept only where someone reads them: once :meth:`serve` serves this
    process's, in a projector child whose orchestrator serves them (multiprocess mode), or
    when OpenTelemetry exports them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry
        self._lock = threading.Lock()
        self._served = False
        self._projector: ProjectorMetrics | None = None
        self._worker: WorkerMetrics | None = None
        self._llm: LlmMetrics | None = None

    @property
    def projector(self) -> ProjectorMetrics:
        with self._lock:
            if self._projector is None:
                enabled = self._served or bool(os.environ.get(MULTIPROC_VAR)) or otel_enabled()
                sink = MetricsSink(PROJECTOR_METRICS, self.registry)
                self._projector = ProjectorMetrics(sink, enabled=enabled)
            return self._projector

    @property
    def worker(self) -> WorkerMetrics:
        with self._lock:
            if self._worker is None:
                self._worker = WorkerMetrics(MetricsSink(WORKER_METRICS, self.registry))
            return self._worker

    @property
    def llm(self) -> LlmMetrics:
        """The LLM counters, on OpenTelemetry's meter (docs/metrics.md)."""
        with self._lock:
            if self._llm is None:
                self._llm = LlmMetrics()
            return self._llm

    def serve(
        self, port: int, host: str = "127.0.0.1", collectors: Iterable[Collector] = ()
    ) -> int:
        """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the port.

        In multiprocess mode the endpoint sums the files of every process of the folder
        (this one's and its projector child's); else it serves the registry. Extra
        ``collectors`` (the Kafka gauges) are added either way.
        """
        from prometheus_client import REGISTRY

        with self._lock:
            self._served = True
            if self._projector is not None:
                self._projector.enabled = True
        registry = self.registry if self.registry is not None else REGISTRY
        multiproc = os.environ.get(MULTIPROC_VAR)
        if multiproc:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=multiproc)
        for collector in collectors:
            registry.register(collector)
        server, _ = start_http_server(port, addr=host, registry=registry)
        bound = int(server.server_address[1])
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound


# ---------------------------------------------------------------------- gauges on scrape


class CachedSource:
    """A value read on demand, at most every ``ttl_s``, waited for at most ``timeout_s``:
    past that the last value is served (the read goes on in its thread and is used by a
    later scrape) and :attr:`ok` is False. A failed read is logged and not retried before
    the ttl, so a scrape never hammers a broker that is down."""

    def __init__(
        self, name: str, read: Callable[[], Any], ttl_s: float = 15.0, timeout_s: float = 5.0
    ) -> None:
        self.name, self._read, self.ttl_s, self.timeout_s = name, read, ttl_s, timeout_s
        self._lock = threading.Lock()
        self._value: Any = None
        self._ok = False
        self._at = float("-inf")
        self._thread: threading.Thread | None = None

    def _refresh(self) -> None:
        try:
            value, ok = self._read(), True
        except Exception as exc:
            log.warning("metrics source %s could not be read: %s", self.name, exc)
            value, ok = None, False
        with self._lock:
            if ok:
                self._value = value
            self._ok, self._at = ok, time.monotonic()

    def get(self) -> tuple[Any, bool]:
        """The value (None before a first good read) and whether it is fresh and good."""
        with self._lock:
            if time.monotonic() - self._at < self.ttl_s:
                return self._value, self._ok
            thread = self._thread
            if thread is None or not thread.is_alive():
                thread = self._thread = threading.Thread(
                    target=self._refresh, name=f"metrics-{self.name}", daemon=True
                )
                thread.start()
        thread.join(self.timeout_s)
        with self._lock:
            return self._value, self._ok and not thread.is_alive()


class KafkaGauges(Collector):
    """``keel_consumer_lag`` and ``keel_dlq_letters``, read from Kafka on scrape.

    ``lag`` returns ``{(topic, group): records}``, ``dlq`` ``{kind: open letters}``
    (wired by the CLI, the composition root: this module imports no Kafka client).
    """

    def __init__(self, lag: CachedSource, dlq: CachedSource) -> None:
        self.lag, self.dlq = lag, dlq

    def collect(self) -> Iterator[PromMetric]:
        up = GaugeMetricFamily(
            Metric.GAUGE_SOURCE_UP, SPECS[Metric.GAUGE_SOURCE_UP].help, labels=["source"]
        )
        for metric, source in ((Metric.CONSUMER_LAG, self.lag), (Metric.DLQ_LETTERS, self.dlq)):
            value, ok = source.get()
            up.add_metric([source.name], 1.0 if ok else 0.0)
            if value is None:
                continue
            spec = SPECS[metric]
            family = GaugeMetricFamily(metric, spec.help, labels=list(spec.labels))
            for labels, n in sorted(value.items()):
                family.add_metric(list(labels), float(n))
            yield family
        yield up

    def register_otel(self, meter: Meter | None = None) -> None:
        """The same gauges as OpenTelemetry observable gauges (read at each export), on
        ``meter`` (the global provider's by default)."""
        meter = meter or otel_metrics.get_meter(OTEL_METER)
        for metric, source in ((Metric.CONSUMER_LAG, self.lag), (Metric.DLQ_LETTERS, self.dlq)):
            spec = SPECS[metric]
            labelled = _Labelled(source, spec.labels)
            meter.create_observable_gauge(
                spec.otel_name(metric), [labelled.observe], spec.unit, spec.help
            )


class _Labelled:
    """A source's ``{label values: n}`` as OpenTelemetry observations with label names."""

    def __init__(self, source: CachedSource, names: tuple[str, ...]) -> None:
        self.source, self.names = source, names

    def observe(self, _options: CallbackOptions) -> Iterator[Observation]:
        value, _ = self.source.get()
        for labels, n in (value or {}).items():
            yield Observation(n, dict(zip(self.names, labels, strict=True)))


# ---------------------------------------------------------------------- serving


def use_multiprocess_dir(home: Path, name: str) -> Path:
    """Put this process (and the children it starts, which inherit the variable) in
    prometheus-client's multiprocess mode, in a fresh ``<home>/metrics/<name>-<pid>``;
    call it before any metric is created. The folder is emptied first (counts start at
    zero with the process), and the folders of ``name`` processes no longer alive (killed
    before they could remove theirs) are removed."""
    root = (home / "metrics").resolve()
    for stale in root.glob(f"{name}-*"):
        pid = stale.name.removeprefix(f"{name}-")
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    path = root / f"{name}-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ[MULTIPROC_VAR] = str(path)
    values.ValueClass = values.get_value_class()  # chosen at import; chosen again here
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def exposition(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The registry's text exposition and its content type (the connector's route)."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return generate_latest(registry or REGISTRY), CONTENT_TYPE_LATEST
