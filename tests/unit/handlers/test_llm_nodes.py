"""LLM nodes without servers: prompts, parsing, cache keys, repair, reuse, agent bounds.

The provider is scripted and the store an in-memory stand-in with the same methods, so
these tests pin the handler's logic; tests/integration/test_llm_*.py run it for real.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from handlers.llm.agent import AgentCall, AgentExhausted
from handlers.llm.cache import CachePolicy, content_hash
from handlers.llm.chat import ProviderUnavailable, parse_retry_after, redact, response_from_json
from handlers.llm.llm_settings import LlmSettings
from handlers.llm.node import (
    INVALID_OUTPUT,
    InvalidModelOutput,
    LlmCall,
    OnInvalid,
    confidence_below,
)
from handlers.llm.prompts import PromptTemplate
from handlers.llm.providers import OpenAIProvider, ScriptedProvider
from handlers.llm.runtime import LlmRuntime, LlmRuntimes, Pricing, parse_output
from handlers.llm.tools import Tool
from handlers.sdk.activity_context import ActivityContext, reset_current, set_current
from handlers.sdk.activity_errors import FailureClass, classify, retry_after_ms
from orchestrator.application.app import KeelApp
from orchestrator.domain.authoring.definitions import WorkflowDefinition
from orchestrator.domain.model.errors import DefinitionError, InvalidInputError
from orchestrator.testing.memory_stores import MemoryCallStore as MemoryStore


class Fields(BaseModel):
    vendor: str
    total: float
    confidence: float


class Doc(BaseModel):
    document: str


PROMPT = PromptTemplate("extract", 1, user="Extract from: $document", system="Be exact.")
GOOD: dict[str, Any] = {"vendor": "ACME", "total": 12.5, "confidence": 0.95}


def run(
    app: KeelApp,
    activity_type: str,
    payload: dict[str, Any],
    script: dict[str, Any],
    store: MemoryStore | None = None,
    key: str = "wf/llm.x/1",
) -> tuple[Any, ScriptedProvider, MemoryStore]:
    store = store or MemoryStore()
    provider = ScriptedProvider(script)
    rt = LlmRuntime(LlmSettings(model="m"), store, provider)  # type: ignore[arg-type]
    services = {LlmRuntimes: LlmRuntimes(lambda: rt)}
    ctx = ActivityContext(
        "wf", "a1", activity_type, 1, 1, key, 0, lambda _: None, services=services
    )
    token = set_current(ctx)
    try:
        handler = app.handler(activity_type)
        return asyncio.run(handler.fn(payload)), provider, store
    except Exception as exc:  # returned for the asserts
        return exc, provider, store
    finally:
        reset_current(token)


def node_app(**call_options: Any) -> tuple[KeelApp, LlmCall, dict[str, Any]]:
    app = KeelApp("t")
    call = LlmCall("x", prompt=PROMPT, output=Fields, model="m", **call_options)
    step = app.llm_step("extract", call)
    payload = {"node_spec": call.spec_digest, "input": {"document": "invoice 7"}}
    app.workflow(WorkflowDefinition.dag("w", 1, Doc, [step], output=lambda ctx: {}))
    return app, call, payload


# -- prompts, parsing, providers ----------------------------------------------------------


def test_prompt_digest_covers_text_and_version_and_render_names_missing_variables():
    same = PromptTemplate("extract", 1, user="Extract from: $document", system="Be exact.")
    assert same.digest == PROMPT.digest
    assert (
        PromptTemplate("extract", 2, user=PROMPT.user, system="Be exact.").digest != PROMPT.digest
    )
    assert PromptTemplate("extract", 1, user=PROMPT.user + " ", system="Be exact.").digest != (
        PROMPT.digest
    )
    assert PROMPT.render({"document": {"a": 1}})[1]["content"] == 'Extract from: {"a":1}'
    with pytest.raises(InvalidInputError, match="prompt 'extract' v1 needs document"):
        PROMPT.render({})


def test_parse_output_reports_not_json_and_schema_errors_on_one_line():
    assert parse_output(json.dumps(GOOD), Fields)[0] == Fields(**GOOD)
    assert parse_output("```json\n" + json.dumps(GOOD) + "\n```", Fields)[0] == Fields(**GOOD)
    _, errors = parse_output("Sure! {vendor: ACME", Fields)
    assert errors[0].startswith("the answer is not JSON")
    _, errors = parse_output('{"unexpected": true}', Fields)
    assert "does not match the schema" in errors[0] and "vendor" in errors[0]


def test_redact_and_retry_after():
    key = "sk-test-0123456789abcdef"
    assert key not in redact(f"Incorrect API key provided: {key}", key)
    assert "sk-test-" not in redact("Incorrect API key provided: sk-test-01***def", key)
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("soon") is None


def test_openai_body_asks_for_the_schema_and_never_shows_the_key():
    settings = LlmSettings(
        base_url="http://127.0.0.1:1/v1", api_key=SecretStr("sk-secret-value-123")
    )
    provider = OpenAIProvider(settings)
    assert "sk-secret" not in repr(provider) and "sk-secret" not in repr(settings)
    from handlers.llm.chat import ChatRequest

    body = provider.body(
        ChatRequest(
            "m", [{"role": "user", "content": "x"}], {"temperature": 0}, {"name": "F", "schema": {}}
        )
    )
    assert body["response_format"]["type"] == "json_schema" and body["temperature"] == 0
    resp = response_from_json(
        {"id": "c1", "model": "m", "choices": [{"message": {"content": "{}"}}], "usage": {}},
        5,
        None,
    )
    assert resp.request_id == "c1" and resp.content == "{}"


def test_unreachable_provider_is_transient():
    provider = OpenAIProvider(LlmSettings(base_url="http://127.0.0.1:9/v1", timeout_s=2))
    from handlers.llm.chat import ChatRequest

    with pytest.raises(ProviderUnavailable) as err:
        asyncio.run(provider.complete(ChatRequest("m", [])))
    assert classify(err.value) == FailureClass.TRANSIENT


def test_cache_key_changes_with_every_part():
    base: dict[str, Any] = dict(
        prompt=PROMPT.describe(),
        model="m",
        parameters={"temperature": 0},
        tools=[{"name": "t", "version": "1"}],
        schema={"name": "F", "version": 1},
        data_version="1",
        input_value={"document": "d"},
    )
    h = content_hash(**base)
    assert content_hash(**base) == h
    changes = {
        "prompt": PromptTemplate("extract", 2, user=PROMPT.user).describe(),
        "model": "m2",
        "parameters": {"temperature": 1},
        "tools": [{"name": "t", "version": "2"}],
        "schema": {"name": "F", "version": 2},
        "data_version": "2",
        "input_value": {"document": "e"},
    }
    for part, value in changes.items():
        assert content_hash(**{**base, part: value}) != h, part


def test_node_spec_is_in_the_step_input_and_the_definition_digest():
    digests = set()
    for version in (1, 2):
        app = KeelApp("t")
        prompt = PromptTemplate("extract", version, user="Extract from: $document")
        call = LlmCall("x", prompt=prompt, output=Fields, model="m")
        step = app.llm_step("extract", call)
        wf = WorkflowDefinition.dag("w", 1, Doc, [step], output=lambda ctx: {})
        digests.add(wf.digest)
    assert len(digests) == 2, "a new prompt version changes the definition digest"
    with pytest.raises(DefinitionError, match="max_repairs"):
        LlmCall("x", prompt=PROMPT, output=Fields, max_repairs=11)


# -- the node --------------------------------------------------------------------------------


def test_valid_answer_is_recorded_with_its_provenance_and_risk_flag():
    app, _, payload = node_app(risk=[confidence_below(0.99)], pricing=Pricing(1_000_000, 2_000_000))
    script = {"responses": [{"json": GOOD, "prompt_tokens": 3, "completion_tokens": 2}]}
    result, _, _ = run(app, "llm.x", payload, script)
    assert result["output"] == GOOD and result["flags"] == ["low_confidence"]
    llm = result["llm"]
    assert llm["prompt"] == {"name": "extract", "version": 1, "digest": PROMPT.digest}
    assert llm["model"] == "m" and llm["schema"] == {"name": "Fields", "version": 1}
    assert llm["calls"][0]["raw_output"] == json.dumps(GOOD)
    assert llm["calls"][0]["request_id"] == "scripted-1" and llm["calls"][0]["valid"]
    assert llm["tokens"] == {"prompt": 3, "completion": 2, "total": 5}
    assert llm["cost_usd"] == 7.0 and llm["cache"]["status"] == "off"
    assert len(llm["input_digest"]) == 64


def test_invalid_twice_then_valid_makes_two_repair_calls_with_the_errors():
    app, _, payload = node_app()
    script = {"responses": [{"content": "not json"}, {"json": {"vendor": 1}}, {"json": GOOD}]}
    result, provider, store = run(app, "llm.x", payload, script)
    calls = result["llm"]["calls"]
    assert [c["purpose"] for c in calls] == ["initial", "repair", "repair"]
    assert [c["valid"] for c in calls] == [False, False, True]
    assert result["llm"]["validation"] == {"valid": True, "repairs": 2}
    assert provider.calls == 3 and len(store.calls) == 3


def test_invalid_past_the_bound_is_permanent_and_carries_the_raw_output():
    app, _, payload = node_app(max_repairs=1)
    script = {"default": {"content": "Sure! {vendor: ACME"}}
    exc, provider, _ = run(app, "llm.x", payload, script)
    assert isinstance(exc, InvalidModelOutput) and classify(exc) == FailureClass.PERMANENT
    assert provider.calls == 2
    text = str(exc)
    assert "output invalid after 2 call(s) (1 repair(s)" in text
    assert 'raw output: "Sure! {vendor: ACME"' in text and "\n" not in text


def test_a_redelivered_attempt_reuses_the_stored_responses_and_never_calls_again():
    app, _, payload = node_app()
    script = {"responses": [{"content": "bad"}, {"json": GOOD}]}
    first, _, store = run(app, "llm.x", payload, script)
    again, provider, _ = run(
        app, "llm.x", payload, {"default": {"json": {**GOOD, "total": 9}}}, store
    )
    assert provider.calls == 0
    assert again["output"] == first["output"]
    assert [c["reused"] for c in again["llm"]["calls"]] == [True, True]
    _, provider, _ = run(app, "llm.x", payload, {"default": {"json": GOOD}}, store, "wf/llm.x/2")
    assert provider.calls == 1, "a new logical attempt asks the model again"


def test_cache_hit_is_recorded_with_its_key_and_calls_nothing():
    app, _, payload = node_app(cache=CachePolicy(ttl_s=60))
    first, _, store = run(app, "llm.x", payload, {"responses": [{"json": GOOD}]})
    assert first["llm"]["cache"]["status"] == "miss"
    hit, provider, _ = run(app, "llm.x", payload, {}, store, "wf2/llm.x/1")
    assert provider.calls == 0 and hit["output"] == GOOD
    assert hit["llm"]["cache"] == {
        "status": "hit",
        "key": first["llm"]["cache"]["key"],
        "source_request_ids": ["scripted-1"],
    }
    store.cache.clear()  # expired: the attempt that used the hit still reuses it
    again, provider, _ = run(app, "llm.x", payload, {}, store, "wf2/llm.x/1")
    assert provider.calls == 0 and again["llm"]["cache"]["status"] == "hit"


def test_retry_after_is_stored_for_the_next_attempt():
    app, _, payload = node_app()
    exc, _, store = run(app, "llm.x", payload, {"responses": [{"status": 429, "retry_after": 30}]})
    assert isinstance(exc, ProviderUnavailable) and classify(exc) == FailureClass.TRANSIENT
    assert store.waits["wf/llm.x/1"] > time.time() + 25
    assert retry_after_ms(exc) == 30_000, "reported: the orchestrator's timer waits it out"
    # delivered again before the delay is over (a crash after the report): no call is made
    again, provider, _ = run(app, "llm.x", payload, {"default": {"json": GOOD}}, store)
    assert isinstance(again, ProviderUnavailable) and provider.calls == 0
    assert str(again).startswith("the provider asked to wait; ")
    assert 25_000 < retry_after_ms(again) <= 30_000
    store.waits["wf/llm.x/1"] = time.time() - 1  # the delay is over: the call is made
    done, provider, _ = run(app, "llm.x", payload, {"default": {"json": GOOD}}, store)
    assert provider.calls == 1 and done["output"] == GOOD


def test_a_retry_after_longer_than_the_workers_cap_is_reported_capped():
    app, _, payload = node_app()
    script = {"responses": [{"status": 429, "retry_after": 9000}]}
    exc, _, store = run(app, "llm.x", payload, script)
    assert retry_after_ms(exc) == 300_000  # KEEL_LLM_MAX_RETRY_AFTER_S (300)
    assert store.waits["wf/llm.x/1"] < time.time() + 301


def test_invalid_past_the_bound_with_on_invalid_flag_completes_with_the_evidence():
    app, call, payload = node_app(max_repairs=1, on_invalid=OnInvalid.FLAG)
    script = {"responses": [{"content": "Sure! {vendor: ACME"}, {"json": {"vendor": "A"}}]}
    result, provider, _ = run(app, "llm.x", payload, script)
    assert provider.calls == 2
    assert result["output"] is None and result["flags"] == [INVALID_OUTPUT]
    record = result["llm"]
    assert [c["raw_output"] for c in record["calls"]] == [
        "Sure! {vendor: ACME",
        '{"vendor": "A"}',
    ]
    assert record["calls"][0]["errors"][0].startswith("the answer is not JSON")
    assert record["validation"] == {
        "valid": False,
        "repairs": 1,
        "errors": [
            "the answer does not match the schema: field 'confidence': Field required; "
            "field 'total': Field required"
        ],
    }
    assert record["tokens"]["total"] > 0 and record["cache"] == {"status": "off", "key": None}
    # the policy is part of the spec, and the default leaves older specs as they were
    _, failing, _ = node_app(max_repairs=1)
    assert call.spec_digest != failing.spec_digest
    assert "on_invalid" not in failing.describe() and call.describe()["on_invalid"] == "flag"
    with pytest.raises(DefinitionError, match="on_invalid must be 'fail' or 'flag'"):
        node_app(on_invalid="retry")


# -- the agent -----------------------------------------------------------------------------


class Verdict(BaseModel):
    trusted: bool


def agent_app(**bounds: Any) -> tuple[KeelApp, dict[str, Any]]:
    app = KeelApp("t")
    tools = [Tool("lookup", "1", lambda args: {"found": args.get("q")}, "Look up.")]
    agent = AgentCall("a", prompt=PROMPT, output=Verdict, tools=tools, model="m", **bounds)
    step = app.llm_step("check", agent)
    app.workflow(WorkflowDefinition.dag("w", 1, Doc, [step], output=lambda ctx: {}))
    return app, {"node_spec": agent.spec_digest, "input": {"document": "d"}}


LOOKUP = {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}


def test_agent_records_each_step_refuses_tools_outside_the_allowlist_and_answers():
    app, payload = agent_app(max_steps=5, on_exhausted="flag")
    script = {
        "responses": [
            LOOKUP,
            {"tool_calls": [{"name": "delete_vendor", "arguments": {}}]},
            {"json": {"trusted": True}},
        ]
    }
    result, _, _ = run(app, "agent.a", payload, script)
    llm = result["llm"]
    assert llm["stop_reason"] == "answered" and result["output"] == {"trusted": True}
    assert result["flags"] == ["tool_refused"] and llm["refused_tools"] == ["delete_vendor"]
    first, second, third = llm["steps"]
    assert first["tool_results"][0]["result"] == {"found": "x"}
    assert "not in the allowlist ['lookup']" in second["tool_results"][0]["refused"]
    assert third["decision"] == {"answer": '{"trusted": true}'}


@pytest.mark.parametrize(
    ("bounds", "script_default", "reason", "calls"),
    [
        ({"max_steps": 3}, LOOKUP, "max_steps", 3),
        ({"max_tokens": 250}, {**LOOKUP, "prompt_tokens": 100}, "token_budget", 3),
        (
            {"max_cost_usd": 0.001, "pricing": Pricing(10, 30)},
            LOOKUP,
            "cost_budget",
            3,  # $0.0004 a call (10 + 10 tokens): 0.0012 >= 0.001 after three
        ),
    ],
)
def test_agent_bounds_stop_it_with_the_reason(bounds, script_default, reason, calls):
    app, payload = agent_app(on_exhausted="flag", **bounds)
    result, provider, _ = run(app, "agent.a", payload, {"default": script_default})
    assert result["llm"]["stop_reason"] == reason
    assert result["flags"] == ["agent_exhausted"] and result["output"] is None
    assert provider.calls == calls
    app, payload = agent_app(on_exhausted="fail", **bounds)
    exc, _, _ = run(app, "agent.a", payload, {"default": script_default})
    assert isinstance(exc, AgentExhausted) and f"stopped: {reason} after {calls} step(s)" in str(
        exc
    )


def test_agent_deadline_counts_from_the_attempts_first_call():
    app, payload = agent_app(deadline_s=5, on_exhausted="flag")
    store = MemoryStore()
    store.starts["wf/agent.a/1"] = time.time() - 10  # the first call was 10 s ago
    result, provider, _ = run(app, "agent.a", payload, {"default": LOOKUP}, store, "wf/agent.a/1")
    assert result["llm"]["stop_reason"] == "deadline" and provider.calls == 0
