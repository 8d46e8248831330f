"""OpenTelemetry metrics of model calls: tokens, cost, calls and cache hits per activity type.

Recorded on the read side, by the live projector after its write to the read model has
committed (:meth:`~orchestrator.runtime.projection.Projection.write_guarded`). The
projector folds each event once (it skips events at or below the sequence number the
read model holds), so a replayed batch counts nothing twice; a rebuild of the read model
does not count again either. Instruments come from the global meter provider: without one
configured they cost nothing; :func:`configure_metrics` installs one (docs/llm-nodes.md,
"Cost and provenance").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from enum import StrEnum

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Meter

from orchestrator.runtime.llm_usage import NodeUsage

METER_NAME = "keel.llm"


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


_lock = threading.Lock()
_default: LlmMetrics | None = None


def llm_metrics() -> LlmMetrics:
    """The process's counters, created on first use from the global meter provider."""
    global _default
    with _lock:
        if _default is None:
            _default = LlmMetrics()
        return _default


def configure_metrics(service: str) -> bool:
    """Install a meter provider when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the OTLP
    metric exporter is installed; returns whether one was installed."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[import-not-found]
            OTLPMetricExporter,
        )
    except ImportError:
        return False
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": service})
    )
    metrics.set_meter_provider(provider)
    return True
