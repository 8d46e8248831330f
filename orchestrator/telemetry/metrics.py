"""OpenTelemetry metrics of model calls: tokens, cost, calls and cache hits per activity type.

Recorded on the read side, by the live projector after its write to the read model has
committed (:meth:`~orchestrator.io.redis.read_model.Projection.write_guarded`). The
projector folds each event once (it skips events at or below the sequence number the
read model holds), so a replayed batch counts nothing twice; a rebuild of the read model
does not count again either. Instruments come from the global meter provider: without one
configured they cost nothing; :func:`configure_metrics` installs an OTLP/HTTP one when the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``) is
set — the exporter reads the other ``OTEL_EXPORTER_OTLP_*`` and ``OTEL_METRIC_EXPORT_*``
variables itself (docs/operations.md, "Metrics").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from enum import StrEnum

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Meter
from opentelemetry.sdk.metrics import MeterProvider

from orchestrator.records.llm_usage import NodeUsage

METER_NAME = "keel.llm"
#: Either turns the OTLP exporter on (the standard OpenTelemetry variables).
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class Instrument(StrEnum):
    TOKENS = "keel.llm.tokens"
    COST = "keel.llm.cost_usd"
    CALLS = "keel.llm.calls"
    NODES = "keel.llm.nodes"
    CACHE_HITS = "keel.llm.cache_hits"


class TokenKind(StrEnum):
    PROMPT = "prompt"
    COMPLETION = "completion"


class LlmMetrics:
    """The counters; one set per meter (the global one unless a test passes its own)."""

    def __init__(self, meter: Meter | None = None) -> None:
        m = meter or metrics.get_meter(METER_NAME)
        self.tokens: Counter = m.create_counter(
            Instrument.TOKENS, unit="{token}", description="Model tokens by activity type."
        )
        self.cost: Counter = m.create_counter(
            Instrument.COST, unit="USD", description="Model cost by activity type."
        )
        self.calls: Counter = m.create_counter(
            Instrument.CALLS, unit="{call}", description="Model calls by activity type."
        )
        self.nodes: Counter = m.create_counter(
            Instrument.NODES, unit="{node}", description="Completed LLM nodes by activity type."
        )
        self.cache_hits: Counter = m.create_counter(
            Instrument.CACHE_HITS, unit="{hit}", description="Cache hits by activity type."
        )

    def record(self, usages: Iterable[NodeUsage], workflow_name: str = "") -> None:
        for u in usages:
            attrs = {"activity_type": u.activity_type, "workflow": workflow_name}
            self.tokens.add(u.prompt_tokens, {**attrs, "kind": str(TokenKind.PROMPT)})
            self.tokens.add(u.completion_tokens, {**attrs, "kind": str(TokenKind.COMPLETION)})
            self.cost.add(u.cost_usd, attrs)
            self.calls.add(u.calls, attrs)
            self.nodes.add(1, attrs)
            if u.cache_hit:
                self.cache_hits.add(1, attrs)


def otlp_meter_provider(service: str) -> MeterProvider | None:
    """An OTLP/HTTP meter provider for ``service`` when an endpoint variable is set, else
    None (metrics off)."""
    if not any(os.environ.get(v) for v in ENDPOINT_VARS):
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": service})
    )


def configure_metrics(service: str) -> bool:
    """Install the OTLP meter provider as the global one when an endpoint is set; returns
    whether one was installed. Its reader exports every ``OTEL_METRIC_EXPORT_INTERVAL`` ms
    (60 s by default) and once more at exit."""
    provider = otlp_meter_provider(service)
    if provider is None:
        return False
    metrics.set_meter_provider(provider)
    return True
