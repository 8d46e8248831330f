"""Cost and provenance of LLM nodes on the read side (no servers).

The usage read from a history line, the increments the projection queues for it, and the
OpenTelemetry counters per activity type (an in-memory metric reader).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator.io.redis.read_model import Projection
from orchestrator.records.llm_usage import UsageField, node_usage, usages_of
from orchestrator.telemetry.metrics import Instrument, LlmMetrics


def record(prompt: int = 20, completion: int = 10, cost: float = 2.5e-05, **extra: Any) -> dict:
    return {
        "node": "extract_invoice",
        "provider": "openai",
        "prompt": {"name": "invoice_extract", "version": 1, "digest": "9c1e"},
        "model": "gpt-4o-mini",
        "calls": [
            {"index": 0, "request_id": "req-1", "model": "gpt-4o-mini-2024-07-18"},
            {"index": 1, "request_id": "req-2", "model": "gpt-4o-mini-2024-07-18"},
        ],
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "cost_usd": cost,
        "cache": {"status": "off", "key": None},
        **extra,
    }


def line(seq: int, result: Any, type_: str = "ActivityCompleted", aid: str = "a-1") -> str:
    data = {"activity_id": aid, "attempt": 1, "result": result}
    return json.dumps({"seq": seq, "type": type_, "recorded_at": 0, "data": data})


def test_a_node_record_gives_its_totals_and_provenance():
    entry = json.loads(line(7, {"output": {}, "llm": record()}))
    usage = node_usage(entry, {"a-1": "llm.extract_invoice"})
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (20, 10, 30)
    assert usage.cost_usd == 2.5e-05 and usage.calls == 2 and usage.cache_hit is False
    assert usage.provenance == {
        "seq": 7,
        "activity_id": "a-1",
        "activity_type": "llm.extract_invoice",
        "node": "extract_invoice",
        "provider": "openai",
        "prompt": "invoice_extract@1",
        "prompt_digest": "9c1e",
        "model": "gpt-4o-mini",
        "models": ["gpt-4o-mini-2024-07-18"],
        "request_ids": ["req-1", "req-2"],
        "cache": "off",
        "tokens": {"prompt": 20, "completion": 10, "total": 30},
        "cost_usd": 2.5e-05,
    }


def test_a_cache_hit_and_an_agent_stop_reason_are_kept():
    rec = record(0, 0, 0.0, cache={"status": "hit", "key": "k"}, stop_reason="answered")
    usage = node_usage(json.loads(line(3, {"llm": rec})), {})
    assert usage is not None and usage.cache_hit is True
    assert usage.activity_type == "llm.extract_invoice", "named by its record when unknown"
    assert usage.provenance["stop_reason"] == "answered"


@pytest.mark.parametrize(
    "text",
    [
        line(1, {"output": 1}),  # an ordinary activity
        line(1, {"llm": record()}, type_="ActivityScheduled"),
        line(1, 'just text mentioning "llm"'),
        line(1, {"llm": "not a record"}),
        '{"type": "ActivityCompleted", "llm": ',  # not JSON
    ],
)
def test_lines_without_a_node_record_count_nothing(text):
    assert usages_of([text], {}) == []


def test_odd_values_in_a_record_count_as_zero_not_as_an_error():
    rec = record()
    rec["tokens"] = {"prompt": "many", "completion": -5}
    rec["cost_usd"] = float("nan")
    (usage,) = usages_of([line(2, {"llm": rec})], {})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cost_usd) == (0, 0, 0.0)


class RecordingPipe:
    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args, **kw: self.ops.append((name, *args))


def test_the_projection_queues_increments_and_provenance_for_new_nodes():
    proj = Projection(None, "pfx")  # type: ignore[arg-type]
    hit = record(0, 0, 0.0, cache={"status": "hit", "key": "k"})
    lines = [line(5, {"llm": record()}), line(6, {"ok": 1}), line(8, {"llm": hit}, aid="a-2")]
    usages = usages_of(lines, {"a-1": "llm.extract_invoice", "a-2": "llm.classify"})
    pipe = RecordingPipe()
    proj._queue_usage(pipe, "wf-1", usages)
    key = "keel:pfx:rm:wf:wf-1"
    assert pipe.ops[:7] == [
        ("hincrby", key, UsageField.PROMPT_TOKENS, 20),
        ("hincrby", key, UsageField.COMPLETION_TOKENS, 10),
        ("hincrby", key, UsageField.TOTAL_TOKENS, 30),
        ("hincrbyfloat", key, UsageField.COST_USD, 2.5e-05),
        ("hincrby", key, UsageField.CACHE_HITS, 1),
        ("hincrby", key, UsageField.NODES, 2),
        ("hincrby", key, UsageField.CALLS, 4),
    ]
    name, list_key, *items = pipe.ops[7]
    assert (name, list_key) == ("rpush", "keel:pfx:rm:llm:wf-1")
    assert [json.loads(i)["activity_type"] for i in items] == [
        "llm.extract_invoice",
        "llm.classify",
    ]


def test_metrics_count_tokens_cost_calls_and_hits_per_activity_type():
    reader = InMemoryMetricReader()
    m = LlmMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    hit = record(0, 0, 0.0, cache={"status": "hit", "key": "k"})
    lines = [
        line(5, {"llm": record()}),
        line(6, {"llm": record(5, 5, 1e-05)}),
        line(8, {"llm": hit}, aid="a-2"),
    ]
    m.record(usages_of(lines, {"a-1": "llm.extract_invoice", "a-2": "llm.classify"}), "inv")
    points: dict[tuple, float] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    a = dict(p.attributes)
                    points[(metric.name, a["activity_type"], a.get("kind"))] = p.value
    t = "llm.extract_invoice"
    assert points[(Instrument.TOKENS, t, "prompt")] == 25
    assert points[(Instrument.TOKENS, t, "completion")] == 15
    assert points[(Instrument.COST, t, None)] == pytest.approx(3.5e-05)
    assert points[(Instrument.CALLS, t, None)] == 4
    assert points[(Instrument.NODES, t, None)] == 2
    assert points[(Instrument.CACHE_HITS, "llm.classify", None)] == 1
    assert (Instrument.CACHE_HITS, t, None) not in points
