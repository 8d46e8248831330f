"""OpenTelemetry for Keel processes: a span per command and per activity run.

The W3C ``traceparent`` travels in each record's Kafka headers and in its envelope,
so one trace follows a workflow from ``keel workflow start`` through every
orchestrator decision and worker call to completion, across processes.
Spans are exported only when asked: ``KEEL_TRACE_FILE`` writes JSON lines (tests,
debugging); ``OTEL_EXPORTER_OTLP_ENDPOINT`` is honoured when the OTLP exporter is
installed.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from orchestrator.config.settings import Settings, load_settings

_propagator = TraceContextTextMapPropagator()
_configured = False
_enabled = False


class JsonLinesExporter(SpanExporter):
    """Appends one JSON object per finished span to a file (several processes may share it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for s in spans:
            ctx = s.get_span_context()
            parent = s.parent
            if ctx is None:
                continue
            lines.append(
                json.dumps(
                    {
                        "name": s.name,
                        "trace_id": format(ctx.trace_id, "032x"),
                        "span_id": format(ctx.span_id, "016x"),
                        "parent_id": format(parent.span_id, "016x") if parent else None,
                        "service": s.resource.attributes.get("service.name"),
                        "attributes": dict(s.attributes or {}),
                    }
                )
            )
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        return SpanExportResult.SUCCESS


def configure_tracing(service_name: str, settings: Settings | None = None) -> None:
    """Install the SDK tracer provider once per process, with exporters from the settings
    (``KEEL_TRACE_FILE``) and OpenTelemetry's own environment."""
    global _configured, _enabled
    if _configured:
        return
    _configured = True
    processors: list[SpanProcessor] = []
    path = (settings or load_settings()).trace_file
    if path is not None:
        processors.append(SimpleSpanProcessor(JsonLinesExporter(str(path))))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore
                OTLPSpanExporter,
            )

            processors.append(BatchSpanProcessor(OTLPSpanExporter()))
        except ImportError:
            pass
    if not processors:
        return  # nothing would see the spans: keep the hot path free of them
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _enabled = True


def enabled() -> bool:
    """True when spans are exported; otherwise processes only pass trace context along."""
    return _enabled


def tracer() -> trace.Tracer:
    return trace.get_tracer("keel")


def extract(traceparent: str | None) -> otel_context.Context | None:
    """The remote parent context named by a ``traceparent`` value, if any."""
    if not traceparent:
        return None
    return _propagator.extract({"traceparent": traceparent})


def current_traceparent() -> str | None:
    carrier: dict[str, Any] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def span(
    name: str,
    traceparent: str | None,
    kind: trace.SpanKind,
    attributes: dict[str, Any],
) -> Iterator[trace.Span | None]:
    """The one span wrapper of Keel's processes: a span when exporting, else ``None``.

    Without an exporter there are no spans, but callers still pass the incoming
    ``traceparent`` on (see :func:`traceparent_in`).
    """
    if not _enabled:
        yield None
        return
    with tracer().start_as_current_span(
        name, context=extract(traceparent), kind=kind, attributes=attributes
    ) as s:
        yield s


def traceparent_in(current: trace.Span | None, incoming: str | None) -> str | None:
    """The trace context records caused inside ``current`` carry on."""
    return incoming if current is None else current_traceparent()


def mark_error(current: trace.Span | None, message: str | None) -> None:
    if current is not None and message:
        current.set_status(trace.Status(trace.StatusCode.ERROR, message))
