"""The per-activity-type LLM counters reach an operator: with the standard
``OTEL_EXPORTER_OTLP_*`` variables set, the OTLP/HTTP exporter posts them to the collector
(here a loopback HTTP server that decodes the protobuf body); unset, metrics stay off.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from orchestrator.records.llm_usage import NodeUsage
from orchestrator.telemetry.metrics import (
    METER_NAME,
    Instrument,
    LlmMetrics,
    configure_metrics,
    otlp_meter_provider,
)


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Collector.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _points(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    req = ExportMetricsServiceRequest()
    req.ParseFromString(body)
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == METER_NAME
            for metric in sm.metrics:
                for p in metric.sum.data_points:
                    attrs = tuple(sorted((a.key, a.value.string_value) for a in p.attributes))
                    out[(metric.name, attrs)] = p.as_double or p.as_int
    return out


def usage(activity_type: str, prompt: int, completion: int, cost: float) -> NodeUsage:
    return NodeUsage(
        seq=1,
        activity_id="a1",
        provenance={},
        activity_type=activity_type,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=cost,
        calls=2,
        cache_hit=False,
    )


def test_the_counters_per_activity_type_are_exported_over_otlp_http(
    collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    provider = otlp_meter_provider("keel-projector")
    assert provider is not None
    m = LlmMetrics(provider.get_meter(METER_NAME))
    m.record([usage("llm.extract_invoice", 40, 20, 5e-05)], "invoice_extraction")
    m.record([usage("llm.classify_invoice", 7, 3, 1e-06)], "invoice_classify")
    assert provider.force_flush(10_000)
    provider.shutdown()
    (path, body), *_ = Collector.received
    assert path == "/v1/metrics"
    points = _points(body)
    extract = (("activity_type", "llm.extract_invoice"), ("workflow", "invoice_extraction"))
    kind = ("kind", "prompt")
    assert points[(Instrument.TOKENS, tuple(sorted((*extract, kind))))] == 40
    assert points[(Instrument.TOKENS, tuple(sorted((*extract, ("kind", "completion")))))] == 20
    assert points[(Instrument.COST, extract)] == pytest.approx(5e-05)
    assert points[(Instrument.CALLS, extract)] == 2
    classify = (("activity_type", "llm.classify_invoice"), ("workflow", "invoice_classify"))
    assert points[(Instrument.TOKENS, tuple(sorted((*classify, kind))))] == 7


def test_the_metrics_endpoint_variable_alone_turns_the_exporter_on(
    collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{collector}/custom/metrics")
    provider = otlp_meter_provider("keel-orchestrator")
    assert provider is not None
    LlmMetrics(provider.get_meter(METER_NAME)).record([usage("llm.x", 1, 1, 0.0)], "w")
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert {p for p, _ in Collector.received} == {"/custom/metrics"}  # flush, then shutdown


def test_without_an_endpoint_metrics_stay_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    assert otlp_meter_provider("keel-projector") is None
    assert configure_metrics("keel-projector") is False
