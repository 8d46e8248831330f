"""The LLM node: a Step whose activity is a built-in LLM activity (docs/llm-nodes.md).

``app.llm_step("extract", LlmCall(...))`` returns an ordinary :class:`Step` and
registers the handler of its activity type (``llm.<call name>``) on ``app``. The step's
input is ``{"node_spec": <digest of the LlmCall>, "input": <your input>, ...}``, so the
definition's digest changes with the prompt, model, schema or policy, and a worker
running other code refuses a task it was not scheduled for instead of answering it
with another prompt.

The handler renders the prompt, asks the provider (or reuses the responses this
attempt already received: :func:`handlers.llm.runtime.obtain`), validates the answer
against the versioned output model, repairs invalid output with bounded new calls
(the validation errors go into the prompt), applies the risk rules and returns the
node's record as the activity result, which the history keeps in ``ActivityCompleted``:
``{"output": ..., "flags": [...], "llm": {prompt, model, parameters, input digest, calls
(raw output, validation, tokens, cost, latency, request id), cache}}``. Invalid output
past the bound is :class:`InvalidModelOutput`, a permanent failure carrying the raw
output in its one-line message; with ``on_invalid=OnInvalid.FLAG`` the node instead
completes with ``output: null``, the flag ``invalid_output`` and its whole record (every
raw output and the validation errors), which a correction task shows as evidence
(docs/llm-nodes.md). Provider timeouts, 429 and 5xx are transient and follow the step's
retry policy (honouring Retry-After).
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from handlers.llm.cache import CachePolicy, CacheStatus, content_hash
from handlers.llm.chat import ChatRequest
from handlers.llm.prompts import PromptTemplate
from handlers.llm.runtime import (
    LlmRuntime,
    Pricing,
    call_summary,
    obtain,
    parse_output,
    runtime,
    totals,
)
from handlers.llm.tools import Tool
from handlers.sdk.activity_context import activity
from handlers.sdk.activity_errors import PermanentError
from orchestrator.application.app import KeelApp
from orchestrator.domain.authoring.definitions import Context, Step
from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.fingerprint import callable_fingerprint, canonical_json

__all__ = [
    "INVALID_OUTPUT",
    "InvalidModelOutput",
    "LlmCall",
    "NodeSpec",
    "OnInvalid",
    "RiskRule",
    "UnknownNodeSpec",
    "confidence_below",
    "has_flag",
    "node_step",
]

#: The flag recorded when a risk rule fires on a low confidence.
LOW_CONFIDENCE = "low_confidence"
#: The flag of a node that answered invalid output past its repairs (``OnInvalid.FLAG``).
INVALID_OUTPUT = "invalid_output"
_ONE_LINE_RAW = 240


class InvalidModelOutput(PermanentError):
    """The model's answer was not valid JSON of the output schema, past the repair bound."""


class OnInvalid(StrEnum):
    """What an LLM node does with output still invalid after its repairs."""

    FAIL = "fail"  # a permanent InvalidModelOutput failure (the message carries the raw output)
    FLAG = "flag"  # complete with output null, flag invalid_output and the whole record


class UnknownNodeSpec(PermanentError):
    """A task names an LLM node spec this worker does not have (another deployment)."""


@dataclass(frozen=True)
class RiskRule:
    """Record ``flag`` in the node's result when ``when(output)`` holds.

    ``when`` must be pure (it runs in the worker; its verdict is recorded, so the
    definition branches on the recorded flag, e.g. ``has_flag("extract", "low_confidence")``).
    """

    flag: str
    when: Callable[[Any], bool]
    description: str = ""


def confidence_below(
    threshold: float, field_name: str = "confidence", flag: str = LOW_CONFIDENCE
) -> RiskRule:
    """Flag ``flag`` when the output's ``field_name`` is below ``threshold``."""

    def low(output: Any) -> bool:
        return bool(getattr(output, field_name) < threshold)

    low.__qualname__ = f"{field_name}_below_{threshold}"
    return RiskRule(flag, low, f"{field_name} < {threshold}")


def has_flag(step: str, flag: str) -> Callable[[Context], bool]:
    """A transition guard: the recorded result of ``step`` carries ``flag``."""

    def check(ctx: Context) -> bool:
        return flag in (ctx.results.get(step) or {}).get("flags", [])

    check.__qualname__ = f"has_flag_{step}_{flag}"
    return check


Runner = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]


class NodeSpec(ABC):
    """What ``app.llm_step`` calls on a node (``LlmCall``, ``AgentCall``): the application
    object sits below the worker's LLM parts, so the node builds its Step and registers
    the handler that runs it (``runner``)."""

    @abstractmethod
    def runner(self) -> Runner:
        """The handler that runs this node's calls."""

    def as_step(
        self,
        app: KeelApp,
        step_name: str,
        input: Callable[[Context], Any] | None,
        step_options: dict[str, Any],
    ) -> Step:
        return node_step(app, step_name, self, self.runner(), input, **step_options)


@dataclass(frozen=True)
class LlmCall(NodeSpec):
    """One bounded model call with a versioned output schema (see module doc).

    ``model`` empty means ``KEEL_LLM_MODEL``; ``parameters`` go to the provider as is
    (``temperature``, ``max_tokens``, ``seed``, ...); ``tools`` are the versioned tools
    whose results the input depends on (recorded, part of the cache key); ``cache`` only
    for read-only nodes; ``data_version`` names the version of the data the input was
    read at (a constant, or a pure function of the context); ``on_invalid`` what
    happens past ``max_repairs`` (:class:`OnInvalid`).
    """

    name: str
    prompt: PromptTemplate
    output: type[BaseModel]
    model: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    tools: Sequence[Tool] = ()
    output_version: int | None = None
    max_repairs: int = 2
    risk: Sequence[RiskRule] = ()
    cache: CachePolicy | None = None
    data_version: str | Callable[[Context], str] | None = None
    pricing: Pricing | None = None
    activity_type: str | None = None
    on_invalid: OnInvalid = OnInvalid.FAIL

    def __post_init__(self) -> None:
        if not (isinstance(self.output, type) and issubclass(self.output, BaseModel)):
            raise DefinitionError(f"LLM node '{self.name}': output must be a pydantic model")
        if not isinstance(self.max_repairs, int) or not 0 <= self.max_repairs <= 10:
            raise DefinitionError(f"LLM node '{self.name}': max_repairs must be 0..10")
        if self.on_invalid not in tuple(OnInvalid):
            raise DefinitionError(f"LLM node '{self.name}': on_invalid must be 'fail' or 'flag'")
        object.__setattr__(self, "on_invalid", OnInvalid(self.on_invalid))
        object.__setattr__(self, "parameters", dict(self.parameters))
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "risk", tuple(self.risk))

    @property
    def type_name(self) -> str:
        return self.activity_type or f"llm.{self.name}"

    @property
    def schema(self) -> dict[str, Any]:
        version = self.output_version or getattr(self.output, "schema_version", 1)
        return {"name": self.output.__name__, "version": version}

    def describe(self) -> dict[str, Any]:
        out = {
            "kind": "llm",
            "name": self.name,
            "prompt": self.prompt.describe(),
            "model": self.model,
            "parameters": self.parameters,
            "tools": [t.describe() for t in self.tools],
            "schema": {**self.schema, "json": self.output.model_json_schema()},
            "max_repairs": self.max_repairs,
            "risk": [[r.flag, callable_fingerprint(r.when)] for r in self.risk],
            "cache": None if self.cache is None else self.cache.ttl_s,
            "pricing": None if self.pricing is None else [*vars(self.pricing).values()],
        }
        if self.on_invalid is not OnInvalid.FAIL:  # absent by default: older digests hold
            out["on_invalid"] = str(self.on_invalid)
        return out

    @property
    def spec_digest(self) -> str:
        return hashlib.sha256(canonical_json(self.describe()).encode()).hexdigest()

    def runner(self) -> Runner:
        return run_call


def node_step(
    app: KeelApp,
    step_name: str,
    node: Any,
    runner: Runner,
    input: Callable[[Context], Any] | None = None,
    **step_options: Any,
) -> Step:
    """A Step for an LLM or agent ``node``; registers its activity handler on ``app``.

    Several definitions (versions) may use the same activity type with other specs:
    the handler keeps every spec by digest and runs the one the task names.
    """
    nodes = app.llm_nodes
    specs = nodes.get(node.type_name)
    if specs is None:
        if node.type_name in app.handlers:
            raise DefinitionError(f"activity '{node.type_name}' already has a non-LLM handler")
        specs = nodes[node.type_name] = {}
        _register(app, node.type_name, specs)
    digest = node.spec_digest
    specs[digest] = (node, runner)
    inner = json.dumps(callable_fingerprint(input))
    data_version = getattr(node, "data_version", None)
    ident = (digest, inner, json.dumps(callable_fingerprint(data_version)))

    def llm_input(ctx: Context) -> dict[str, Any]:
        value = input(ctx) if input is not None else dict(ctx.input_dict)
        out: dict[str, Any] = {"node_spec": ident[0], "input": value}
        if data_version is not None:
            out["data_version"] = data_version(ctx) if callable(data_version) else data_version
        return out

    llm_input.__qualname__ = f"llm_input_{step_name}"
    return Step(step_name, node.type_name, input=llm_input, **step_options)


def _register(app: KeelApp, activity_type: str, specs: dict[str, Any]) -> None:
    async def run_llm_node(payload: Any) -> dict[str, Any]:
        if not isinstance(payload, dict) or "node_spec" not in payload or "input" not in payload:
            raise PermanentError(f"task input of '{activity_type}' is not an LLM node input")
        found = specs.get(payload["node_spec"])
        if found is None:
            raise UnknownNodeSpec(
                f"'{activity_type}': this worker has no node spec {payload['node_spec'][:12]} "
                f"(it knows {', '.join(d[:12] for d in specs)}); deploy the code that "
                "scheduled it"
            )
        node, runner = found
        return await runner(node, payload)

    run_llm_node.__qualname__ = f"run_llm_node[{activity_type}]"
    app.activity(activity_type)(run_llm_node)


def schema_instruction(output: type[BaseModel], schema: dict[str, Any]) -> dict[str, str]:
    text = json.dumps(output.model_json_schema(), separators=(",", ":"))
    return {
        "role": "system",
        "content": (
            f"Answer with only one JSON object matching the JSON schema "
            f"{schema['name']} v{schema['version']}: {text}"
        ),
    }


def repair_message(errors: list[str]) -> dict[str, str]:
    return {
        "role": "user",
        "content": (
            "Your previous answer could not be used: "
            + "; ".join(errors)
            + ". Answer again with only one JSON object matching the schema."
        ),
    }


def _resolve_model(call_model: str, rt: LlmRuntime, name: str) -> str:
    model = call_model or rt.settings.model
    if not model:
        raise PermanentError(f"LLM node '{name}' names no model and KEEL_LLM_MODEL is not set")
    return model


async def run_call(call: LlmCall, payload: dict[str, Any]) -> dict[str, Any]:
    """The handler body of one LLM node (see module doc)."""
    rt = runtime()
    ctx = activity()
    variables = payload["input"]
    if not isinstance(variables, dict):
        raise PermanentError(f"LLM node '{call.name}': the input must be a JSON object")
    model = _resolve_model(call.model, rt, call.name)
    schema = call.schema
    messages: list[dict[str, Any]] = [
        *call.prompt.render(variables),
        schema_instruction(call.output, schema),
    ]
    pricing = rt.pricing(call.pricing)
    input_digest = hashlib.sha256(canonical_json(variables).encode()).hexdigest()
    record: dict[str, Any] = {
        "node": call.name,
        "provider": rt.provider.name,
        "prompt": call.prompt.describe(),
        "model": model,
        "parameters": call.parameters,
        "tools": [t.describe() for t in call.tools],
        "schema": schema,
        "input_digest": input_digest,
        "data_version": payload.get("data_version"),
    }
    cache_hash = None
    if call.cache is not None:
        cache_hash = content_hash(
            prompt=call.prompt.describe(),
            model=model,
            parameters=dict(call.parameters),
            tools=[t.describe() for t in call.tools],
            schema=schema,
            data_version=payload.get("data_version"),
            input_value=variables,
        )
        hit = await _cache_hit(rt, ctx.idempotency_key, cache_hash)
        if hit is not None:
            return {
                "output": hit["output"],
                "flags": hit["flags"],
                "llm": {
                    **record,
                    "calls": [],
                    "validation": {"valid": True, "repairs": 0},
                    **totals([]),
                    "cache": {
                        "status": CacheStatus.HIT,
                        "key": cache_hash,
                        "source_request_ids": hit.get("request_ids", []),
                    },
                },
            }
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for index in range(call.max_repairs + 1):
        request = ChatRequest(
            model=model,
            messages=messages,
            parameters=dict(call.parameters),
            response_schema={"name": schema["name"], "schema": call.output.model_json_schema()},
            call_key=f"{ctx.idempotency_key}#{index}",
        )
        raw, reused = await obtain(rt, ctx, index, request)
        summary = call_summary(raw, reused, pricing, "initial" if index == 0 else "repair")
        parsed, errors = parse_output(raw.get("content"), call.output)
        summary["valid"] = not errors
        summary["errors"] = errors
        calls.append(summary)
        if parsed is not None:
            flags = [rule.flag for rule in call.risk if rule.when(parsed)]
            output = parsed.model_dump(mode="json")
            status = CacheStatus.OFF
            if cache_hash is not None and call.cache is not None:
                status = CacheStatus.MISS
                ids = [c["request_id"] for c in calls]
                entry = {"output": output, "flags": flags, "request_ids": ids}
                await rt.store.cache_put(cache_hash, entry, call.cache.ttl_s)
            return {
                "output": output,
                "flags": flags,
                "llm": {
                    **record,
                    "calls": calls,
                    "validation": {"valid": True, "repairs": index},
                    **totals(calls),
                    "cache": {"status": status, "key": cache_hash},
                },
            }
        messages = [
            *messages,
            {"role": "assistant", "content": raw.get("content") or ""},
            repair_message(errors),
        ]
    spent = totals(calls)
    if call.on_invalid is OnInvalid.FLAG:
        return {
            "output": None,
            "flags": [INVALID_OUTPUT],
            "llm": {
                **record,
                "calls": calls,
                "validation": {"valid": False, "repairs": len(calls) - 1, "errors": errors},
                **spent,
                "cache": {
                    "status": CacheStatus.MISS if cache_hash else CacheStatus.OFF,
                    "key": cache_hash,
                },
            },
        }
    last_raw = json.dumps(calls[-1]["raw_output"])[:_ONE_LINE_RAW]
    raise InvalidModelOutput(
        f"LLM node '{call.name}': output invalid after {len(calls)} call(s) "
        f"({len(calls) - 1} repair(s), {spent['tokens']['total']} tokens); "
        f"raw output: {last_raw}; errors: {' '.join('; '.join(errors).split())}; "
        f"request ids {[c['request_id'] for c in calls]}"
    )


async def _cache_hit(rt: LlmRuntime, attempt_key: str, cache_hash: str) -> dict[str, Any] | None:
    """A cache entry for this attempt: the one it already used, or a fresh lookup.

    A hit is stored as the attempt's call 0, so a redelivery reuses it even after the
    entry expired (never resampled); a miss stores nothing (the call will).
    """
    first = await rt.store.get_call(attempt_key, 0)
    if first is not None:
        return first.get("entry") if first.get("kind") == "cache_hit" else None
    entry = await rt.store.cache_get(cache_hash)
    if entry is None:
        return None
    stored, _ = await rt.store.put_call(
        attempt_key, 0, {"kind": "cache_hit", "key": cache_hash, "entry": entry}
    )
    return stored.get("entry") if stored.get("kind") == "cache_hit" else None
