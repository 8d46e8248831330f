"""The bounded agent node: the model picks the next tool from an allowlist, within bounds.

For a step whose path is not known in advance (docs/llm-nodes.md). Each step is one
model call; its decision (tool calls or a final answer), every tool call and its result
are recorded in the node's result, and every model response and tool result is stored
by attempt like any LLM call, so a redelivered task replays the same steps without
asking the model or running a tool again.

Before each *new* model call the bounds are checked, in this order: ``max_steps``,
the token budget, the cost budget, the deadline (wall-clock seconds since the
attempt's first call). The first bound reached stops the loop and is recorded as
``stop_reason``; then the definition's exhaustion path runs: ``"fail"`` fails the node
permanently with the reason (the step's failure path), ``"flag"`` returns a result
flagged ``agent_exhausted`` that the definition branches on (e.g. to a human). A tool
outside the allowlist is refused (nothing runs), the refusal is recorded and told to the
model, and the result is flagged ``tool_refused``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ValidationError

from handlers.llm.chat import ChatRequest
from handlers.llm.node import (
    NodeSpec,
    Runner,
    _resolve_model,
    repair_message,
    schema_instruction,
)
from handlers.llm.prompts import PromptTemplate
from handlers.llm.runtime import Pricing, call_summary, obtain, parse_output, runtime, totals
from handlers.llm.tools import Tool
from handlers.sdk.activity_context import activity
from handlers.sdk.activity_errors import PermanentError
from orchestrator.domain.model.errors import DefinitionError, format_validation_error
from orchestrator.domain.model.fingerprint import canonical_json

__all__ = ["AgentCall", "AgentExhausted", "Exhaustion", "StopReason"]

#: Characters of one tool result kept in the record (the store keeps it whole).
MAX_TOOL_RESULT_IN_RECORD = 4096


class StopReason(StrEnum):
    ANSWERED = "answered"
    MAX_STEPS = "max_steps"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    DEADLINE = "deadline"


class Exhaustion(StrEnum):
    """What a bound reached means: the node fails, or returns a flagged result."""

    FAIL = "fail"
    FLAG = "flag"


AGENT_EXHAUSTED = "agent_exhausted"
TOOL_REFUSED = "tool_refused"


class AgentExhausted(PermanentError):
    """An agent node stopped at a bound without an answer (``on_exhausted="fail"``)."""


@dataclass(frozen=True)
class AgentCall(NodeSpec):
    name: str
    prompt: PromptTemplate
    output: type[BaseModel]
    tools: Sequence[Tool]
    model: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    max_steps: int = 8
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline_s: float | None = None
    on_exhausted: Exhaustion | str = Exhaustion.FAIL
    output_version: int | None = None
    pricing: Pricing | None = None
    activity_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or not 1 <= self.max_steps <= 100:
            raise DefinitionError(f"agent '{self.name}': max_steps must be 1..100")
        if not self.tools:
            raise DefinitionError(f"agent '{self.name}': needs at least one tool")
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise DefinitionError(f"agent '{self.name}': duplicate tool names {names}")
        object.__setattr__(self, "on_exhausted", Exhaustion(self.on_exhausted))
        object.__setattr__(self, "parameters", dict(self.parameters))
        object.__setattr__(self, "tools", tuple(self.tools))

    @property
    def type_name(self) -> str:
        return self.activity_type or f"agent.{self.name}"

    @property
    def schema(self) -> dict[str, Any]:
        version = self.output_version or getattr(self.output, "schema_version", 1)
        return {"name": self.output.__name__, "version": version}

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "agent",
            "name": self.name,
            "prompt": self.prompt.describe(),
            "model": self.model,
            "parameters": self.parameters,
            "tools": [t.describe() for t in self.tools],
            "schema": {**self.schema, "json": self.output.model_json_schema()},
            "bounds": [self.max_steps, self.max_tokens, self.max_cost_usd, self.deadline_s],
            "on_exhausted": str(self.on_exhausted),
            "pricing": None if self.pricing is None else [*vars(self.pricing).values()],
        }

    @property
    def spec_digest(self) -> str:
        return hashlib.sha256(canonical_json(self.describe()).encode()).hexdigest()

    def runner(self) -> Runner:
        return run_agent


def _bound_reached(
    agent: AgentCall, steps: int, spent: dict[str, Any], started: float
) -> str | None:
    if steps >= agent.max_steps:
        return StopReason.MAX_STEPS
    if agent.max_tokens is not None and spent["tokens"]["total"] >= agent.max_tokens:
        return StopReason.TOKEN_BUDGET
    if agent.max_cost_usd is not None and spent["cost_usd"] >= agent.max_cost_usd:
        return StopReason.COST_BUDGET
    if agent.deadline_s is not None and time.time() - started >= agent.deadline_s:
        return StopReason.DEADLINE
    return None


def _cut(value: Any) -> Any:
    text = json.dumps(value, default=repr)
    return value if len(text) <= MAX_TOOL_RESULT_IN_RECORD else text[:MAX_TOOL_RESULT_IN_RECORD]


async def _tool_result(
    agent: AgentCall, attempt_key: str, index: int, j: int, name: str, arguments: str
) -> dict[str, Any]:
    """Run (or reuse) tool call ``j`` of step ``index``; refused outside the allowlist."""
    rt = runtime()
    allowed = {t.name: t for t in agent.tools}
    tool = allowed.get(name)
    if tool is None:
        return {
            "tool": name,
            "arguments": arguments,
            "refused": f"tool '{name}' is not in the allowlist {sorted(allowed)}",
        }
    slot = f"tool{j}.{index}"
    stored = await rt.store.get_call(attempt_key, slot)
    if stored is not None:
        return {**stored, "reused": True}
    entry: dict[str, Any] = {"tool": name, "version": tool.version, "arguments": arguments}
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
        entry["result"] = await tool.run(args)
    except ValidationError as exc:
        entry["error"] = f"invalid arguments: {format_validation_error(exc)}"
    except ValueError as exc:
        entry["error"] = f"invalid arguments: {exc}"
    except Exception as exc:  # a tool's failure is told to the model, recorded, not raised
        entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
    stored, _ = await rt.store.put_call(attempt_key, slot, entry)
    return {**stored, "reused": False}


async def run_agent(agent: AgentCall, payload: dict[str, Any]) -> dict[str, Any]:
    """The handler body of one agent node (see module doc)."""
    rt = runtime()
    ctx = activity()
    key = ctx.idempotency_key
    variables = payload["input"]
    if not isinstance(variables, dict):
        raise PermanentError(f"agent '{agent.name}': the input must be a JSON object")
    model = _resolve_model(agent.model, rt, agent.name)
    pricing = rt.pricing(agent.pricing)
    messages: list[dict[str, Any]] = [
        *agent.prompt.render(variables),
        schema_instruction(agent.output, agent.schema),
    ]
    tools = [t.definition() for t in agent.tools]
    started = await rt.store.started_at(key, time.time())
    calls: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    refused: list[str] = []
    output: Any = None
    reason: str | None = None
    index = 0
    while True:
        if await rt.store.get_call(key, index) is None:  # a new call: within the bounds?
            reason = _bound_reached(agent, index, totals(calls), started)
            if reason is not None:
                break
        request = ChatRequest(
            model=model,
            messages=messages,
            parameters=dict(agent.parameters),
            tools=tools,
            call_key=f"{key}#{index}",
        )
        raw, reused = await obtain(rt, ctx, index, request)
        summary = call_summary(raw, reused, pricing, "agent_step")
        calls.append(summary)
        step: dict[str, Any] = {
            "step": index,
            "request_id": summary["request_id"],
            "tokens": summary["prompt_tokens"] + summary["completion_tokens"],
            "cost_usd": summary["cost_usd"],
            "reused": reused,
        }
        steps.append(step)
        tool_calls = raw.get("tool_calls") or []
        if tool_calls:
            step["decision"] = {
                "tool_calls": [{"tool": t["name"], "arguments": t["arguments"]} for t in tool_calls]
            }
            messages = [
                *messages,
                {
                    "role": "assistant",
                    "content": raw.get("content"),
                    "tool_calls": [
                        {
                            "id": t["id"],
                            "type": "function",
                            "function": {"name": t["name"], "arguments": t["arguments"]},
                        }
                        for t in tool_calls
                    ],
                },
            ]
            results = []
            for j, t in enumerate(tool_calls):
                result = await _tool_result(agent, key, index, j, t["name"], t["arguments"])
                if "refused" in result:
                    refused.append(t["name"])
                shown = {k: _cut(v) if k == "result" else v for k, v in result.items()}
                results.append(shown)
                told = {k: result[k] for k in ("result", "error", "refused") if k in result}
                messages.append(
                    {"role": "tool", "tool_call_id": t["id"], "content": json.dumps(told)}
                )
            step["tool_results"] = results
        else:
            step["decision"] = {"answer": summary["raw_output"]}
            parsed, errors = parse_output(raw.get("content"), agent.output)
            step["valid"] = not errors
            step["errors"] = errors
            if parsed is not None:
                output = parsed.model_dump(mode="json")
                reason = StopReason.ANSWERED
                break
            messages = [
                *messages,
                {"role": "assistant", "content": raw.get("content") or ""},
                repair_message(errors),
            ]
        index += 1
    spent = totals(calls)
    flags = [TOOL_REFUSED] if refused else []
    if reason != StopReason.ANSWERED:
        if agent.on_exhausted == Exhaustion.FAIL:
            tools_called = [r["tool"] for s in steps for r in s.get("tool_results", [])]
            raise AgentExhausted(
                f"agent '{agent.name}' stopped: {reason} after {len(steps)} step(s), "
                f"{spent['tokens']['total']} tokens, ${spent['cost_usd']:g}; "
                f"tools called {tools_called}; refused {refused}"
            )
        flags = [AGENT_EXHAUSTED, *flags]
    return {
        "output": output,
        "flags": flags,
        "llm": {
            "kind": "agent",
            "node": agent.name,
            "provider": rt.provider.name,
            "prompt": agent.prompt.describe(),
            "model": model,
            "parameters": agent.parameters,
            "tools": [t.describe() for t in agent.tools],
            "schema": agent.schema,
            "input_digest": hashlib.sha256(canonical_json(variables).encode()).hexdigest(),
            "stop_reason": str(reason),
            "bounds": {
                "max_steps": agent.max_steps,
                "max_tokens": agent.max_tokens,
                "max_cost_usd": agent.max_cost_usd,
                "deadline_s": agent.deadline_s,
            },
            "steps": steps,
            "refused_tools": refused,
            "calls": calls,
            **spent,
        },
    }
