"""LLM nodes end to end: orchestrator + worker processes, real Kafka and Redis, and the
local OpenAI-compatible fake (ops/fakes/openai_server.py) as the model provider.

Assertions read the event history (keel.events) and the provider's own request log.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ops.fakes.openai_server import running
from orchestrator.client.client import KeelClient
from orchestrator.examples.llm_invoices import app as llm_app
from tests.support import assert_sound_history, histories

APP = "orchestrator.examples.llm_invoices:app"
API_KEY = "sk-keel-test-7f3a9c1e5b2d4e6f8a0b"


def fields(vendor: str = "ACME", total: float = 120.0, confidence: float = 0.95) -> dict[str, Any]:
    return {
        "vendor": vendor,
        "invoice_number": "INV-1",
        "total": total,
        "currency": "EUR",
        "confidence": confidence,
    }


@pytest.fixture(scope="module")
def fake_server():
    with running() as fake:
        yield fake


@pytest.fixture
def fake(fake_server):
    fake_server.reset()
    return fake_server


@pytest.fixture
def llm(settings, services, fake):
    """Orchestrator and worker of the LLM example app, pointed at the fake."""
    services.env.update(KEEL_LLM_BASE_URL=fake.api_root, KEEL_LLM_API_KEY=API_KEY)
    services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    c = KeelClient(settings, llm_app)
    yield c
    c.close()


def events_of(settings, wf: str, expect: int = 0) -> list:
    return histories(settings, expect).get(wf, [])


def completed_result(events: list, step_type: str = "ActivityCompleted") -> dict[str, Any]:
    done = [e for e in events if e.type == step_type]
    assert len(done) == 1, [e.type for e in events]
    return json.loads(done[0].payload.result_json)


def test_a_valid_answer_is_recorded_and_routes_the_run(settings, llm, fake):
    fake.script([{"match": "doc-ok", "json": fields(total=4200.0)}])
    llm.start("invoice_extraction", {"document": "doc-ok"}, workflow_id="ok-1", version=1)
    done = llm.wait("ok-1", 60)
    assert done.status == "completed"
    assert done.output == {"route": "approval", "total": 4200.0, "vendor": "ACME"}
    events = events_of(settings, "ok-1")
    assert_sound_history("ok-1", events)
    record = completed_result(events)["llm"]
    assert record["prompt"]["name"] == "invoice_extract" and record["prompt"]["version"] == 1
    assert record["model"] == "keel-test-model" and record["parameters"] == {"temperature": 0}
    assert record["schema"] == {"name": "InvoiceFields", "version": 1}
    (call,) = record["calls"]
    assert call["request_id"] == "req-1" and json.loads(call["raw_output"]) == fields(total=4200.0)
    assert record["tokens"] == {"prompt": 20, "completion": 10, "total": 30}
    assert record["cost_usd"] == pytest.approx((20 * 0.5 + 10 * 1.5) / 1e6)
    (request,) = fake.requests()
    assert request["call"] == "ok-1/llm.extract_invoice/1#0"
    assert request["response_format"] == "json_schema" and request["authorized"] is True


def test_low_confidence_is_flagged_and_the_definition_branches_on_it(settings, llm, fake):
    fake.script([{"match": "doc-unsure", "json": fields(confidence=0.4)}])
    llm.start("invoice_extraction", {"document": "doc-unsure"}, workflow_id="unsure-1", version=1)
    done = llm.wait("unsure-1", 60)
    assert done.output["route"] == "review"
    assert completed_result(events_of(settings, "unsure-1"))["flags"] == ["low_confidence"]


def test_malformed_twice_then_valid_makes_two_recorded_repairs(settings, llm, fake):
    fake.set_faults(malformed=1, wrong_schema=1)
    fake.script([{"match": "doc-repair", "json": fields()}])
    llm.start("invoice_extraction", {"document": "doc-repair"}, workflow_id="repair-1", version=1)
    assert llm.wait("repair-1", 60).status == "completed"
    events = events_of(settings, "repair-1")
    assert [e.type for e in events].count("ActivityScheduled") == 1, (
        "repairs are calls, not retries"
    )
    calls = completed_result(events)["llm"]["calls"]
    assert [(c["purpose"], c["valid"]) for c in calls] == [
        ("initial", False),
        ("repair", False),
        ("repair", True),
    ]
    assert calls[0]["errors"][0].startswith("the answer is not JSON")
    assert "does not match the schema" in calls[1]["errors"][0]
    requests = fake.requests()
    assert [r["call"] for r in requests] == [
        f"repair-1/llm.extract_invoice/1#{i}" for i in range(3)
    ]
    assert "could not be used" in requests[2]["messages"][-1]["content"], "errors in the prompt"


def test_malformed_past_the_bound_fails_permanently_with_the_raw_output(settings, llm, fake):
    fake.set_faults(malformed=-1)
    llm.start("invoice_extraction", {"document": "doc-bad"}, workflow_id="bad-1", version=1)
    done = llm.wait("bad-1", 60)
    assert done.status == "failed"
    events = events_of(settings, "bad-1")
    (failed,) = [e.payload for e in events if e.type == "ActivityFailed"]
    assert failed.failure_class == "permanent" and failed.error_type == "InvalidModelOutput"
    assert "output invalid after 3 call(s) (2 repair(s)" in failed.message
    assert 'raw output: "Sure! Here is the data: {vendor: ACME,"' in failed.message
    assert done.failure_reason.startswith("extraction needs a human correction: ")
    assert len(fake.requests()) == 3


def test_429_with_retry_after_is_retried_as_transient_after_the_stated_delay(settings, llm, fake):
    fake.set_faults(status_429=1, retry_after_s=2)
    fake.script([{"match": "doc-busy", "json": fields()}])
    llm.start("invoice_extraction", {"document": "doc-busy"}, workflow_id="busy-1", version=1)
    assert llm.wait("busy-1", 60).status == "completed"
    events = events_of(settings, "busy-1")
    assert_sound_history("busy-1", events)
    (failed_env,) = [e for e in events if e.type == "ActivityFailed"]
    failed = failed_env.payload
    assert failed.failure_class == "transient" and failed.attempt == 1
    assert "provider answered 429; Retry-After 2s" in failed.message
    assert failed.retry_after_ms == 2000, "the worker reported the provider's Retry-After"
    # the decider's retry timer waits it out (the policy's backoff alone is <= 100 ms)
    timers = [e.payload for e in events if e.type == "TimerScheduled"]
    (timer,) = [t for t in timers if t.purpose.startswith("retry:")]
    assert timer.fire_at - failed_env.recorded_at == 2000
    (fired,) = [
        e for e in events if e.type == "TimerFired" and e.payload.timer_id == timer.timer_id
    ]
    (second_dispatch,) = [e for e in events if e.type == "ActivityScheduled"][1:]
    assert fired.seq < second_dispatch.seq
    scheduled = [e.payload.attempt for e in events if e.type == "ActivityScheduled"]
    assert scheduled == [1, 2]
    assert [e.payload.attempt for e in events if e.type == "ActivityCompleted"] == [2]
    first, second = fake.requests()
    assert first["outcome"] == "429" and second["outcome"] == "scripted"
    assert first["call"] == second["call"] == "busy-1/llm.extract_invoice/1#0"
    assert second["at"] - first["at"] >= 1.8, "the second call was made after Retry-After"


def test_cache_hits_on_same_inputs_and_misses_on_any_version_change(settings, llm, fake):
    fake.script([], default={"json": {"category": "office"}})
    runs = [  # (workflow id, definition version, data version, expected cache status)
        ("c-first", 1, "1", "miss"),
        ("c-same", 1, "1", "hit"),
        ("c-prompt", 2, "1", "miss"),  # prompt v2
        ("c-model", 3, "1", "miss"),  # model b
        ("c-tool", 4, "1", "miss"),  # tool v2
        ("c-data", 4, "2", "miss"),  # data version 2
        ("c-data-again", 4, "2", "hit"),
    ]
    for wf, version, data, expected in runs:
        llm.start("invoice_classify", {"document": "doc-cache", "data_version": data}, wf, version)
        done = llm.wait(wf, 60)
        assert done.output == {"category": "office", "cache": expected}, wf
    assert len(fake.requests()) == 5, "one provider call per miss, none per hit"
    hits = {}
    for wf in ("c-first", "c-same"):
        hits[wf] = completed_result(events_of(settings, wf))["llm"]["cache"]
    assert hits["c-same"]["status"] == "hit" and hits["c-same"]["key"] == hits["c-first"]["key"]
    assert hits["c-same"]["source_request_ids"] == ["req-1"]
