"""What every LLM handler shares in a worker: settings, the store, the provider, one call.

:func:`obtain` is the heart of "never resampled by recovery": call ``index`` of an
attempt is first looked up in the store; only when it is not there is the provider
asked, and its raw response is stored (before anything is reported) and read back.
A ``Retry-After`` the provider sent is reported with the transient failure (capped at
``KEEL_LLM_MAX_RETRY_AFTER_S``): the orchestrator's retry timer fires no earlier than
that. It is stored too (``llm:wait:<K>``), so a task delivered again before the delay
is over (a worker crash after the report) fails again without calling the provider
(docs/llm-nodes.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handlers.llm.chat import CallStore, ChatRequest, Provider, ProviderUnavailable
from handlers.llm.llm_settings import LlmSettings
from handlers.sdk.activity_context import ActivityContext, activity
from orchestrator.domain.model.errors import ConfigError, DefinitionError, format_validation_error

__all__ = [
    "LlmRuntime",
    "LlmRuntimes",
    "Pricing",
    "obtain",
    "parse_output",
    "runtime",
]

log = logging.getLogger("keel.worker.llm")

#: Characters of one raw output kept in a node's result (the store keeps it whole).
MAX_RAW_IN_RECORD = 16 * 1024
#: A stored Retry-After this close to its end is waited out, not reported again: the
#: orchestrator's timer and this worker's clock may disagree by that much.
CLOCK_SKEW_S = 1.0


@dataclass(frozen=True)
class Pricing:
    """USD per million prompt (input) and completion (output) tokens."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    def __post_init__(self) -> None:
        if self.input_per_mtok < 0 or self.output_per_mtok < 0:
            raise DefinitionError("Pricing must not be negative")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        raw = prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok
        return round(raw / 1_000_000, 8)


@dataclass
class LlmRuntime:
    settings: LlmSettings
    store: CallStore
    provider: Provider

    def pricing(self, override: Pricing | None) -> Pricing:
        if override is not None:
            return override
        s = self.settings
        return Pricing(s.price_input_per_mtok, s.price_output_per_mtok)


class LlmRuntimes:
    """Where a process's attempts find its LLM runtime: one per process, made by its
    composition root (orchestrator/cli/services.py) and given to its activity-attempt
    runner, which hands it to every attempt's context. The runtime is built by ``factory``
    on the first LLM step, so the provider (aiohttp) and the store (redis) load only then.
    """

    def __init__(self, factory: Callable[[], LlmRuntime]) -> None:
        self._factory = factory
        self._built: LlmRuntime | None = None
        self._lock = threading.Lock()

    def get(self) -> LlmRuntime:
        """The runtime, built on first use."""
        with self._lock:
            if self._built is None:
                self._built = self._factory()
            return self._built

    def use(self, rt: LlmRuntime | None) -> None:
        """Answer with ``rt`` from now on (a test's scripted model); None: build with the
        factory again on next use."""
        with self._lock:
            self._built = rt


NO_RUNTIME = (
    "no LLM runtime for this attempt: LLM steps run in `keel worker` (or `keel orchestrator` "
    "for local steps), whose attempt runner is given one"
)


def runtime() -> LlmRuntime:
    """The runtime of the attempt being run: the one its process's runner gave its context."""
    found = activity().services.get(LlmRuntimes)
    if not isinstance(found, LlmRuntimes):
        raise ConfigError(NO_RUNTIME)
    return found.get()


async def _respect_retry_after(rt: LlmRuntime, key: str, index: int) -> None:
    """Raise ``ProviderUnavailable`` while the provider's stated delay for ``key`` runs."""
    left = await rt.store.not_before(key) - time.time()
    if left <= 0:
        return
    if left <= CLOCK_SKEW_S:
        await asyncio.sleep(left)
        return
    log.info("call %d of %s not made: Retry-After has %.1fs left", index, key, left)
    raise ProviderUnavailable(
        f"the provider asked to wait; {left:.1f}s of its Retry-After are left", left
    )


async def obtain(
    rt: LlmRuntime, ctx: ActivityContext, index: int, request: ChatRequest
) -> tuple[dict[str, Any], bool]:
    """Call ``index`` of this attempt: (its raw response record, whether it was reused)."""
    key = ctx.idempotency_key
    stored = await rt.store.get_call(key, index)
    if stored is not None:
        return stored, True
    await _respect_retry_after(rt, key, index)
    try:
        response = await rt.provider.complete(request)
    except ProviderUnavailable as exc:
        if exc.retry_after_s:
            exc.retry_after_s = min(exc.retry_after_s, rt.settings.max_retry_after_s)
            await rt.store.set_not_before(key, time.time() + exc.retry_after_s)
        raise
    record = {"kind": "response", "index": index, "at": time.time(), **response.record()}
    stored, fresh = await rt.store.put_call(key, index, record)
    return stored, not fresh


def parse_output(content: str | None, model: Any) -> tuple[Any, list[str]]:
    """(the validated output, []) or (None, the problems, one line each)."""
    from pydantic import ValidationError

    if content is None or not content.strip():
        return None, ["the answer is empty (no JSON object)"]
    text = content.strip()
    if text.startswith("```"):  # a fenced block: ```json ... ```
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, [f"the answer is not JSON ({exc})"]
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [f"the answer does not match the schema: {format_validation_error(exc)}"]


def call_summary(
    record: dict[str, Any], reused: bool, pricing: Pricing, purpose: str
) -> dict[str, Any]:
    """One call as the node's result records it."""
    raw = record.get("content")
    summary: dict[str, Any] = {
        "index": record.get("index"),
        "purpose": purpose,
        "request_id": record.get("request_id"),
        "model": record.get("model"),
        "raw_output": raw
        if raw is None or len(raw) <= MAX_RAW_IN_RECORD
        else raw[:MAX_RAW_IN_RECORD],
        "prompt_tokens": record.get("prompt_tokens", 0),
        "completion_tokens": record.get("completion_tokens", 0),
        "cost_usd": pricing.cost(
            record.get("prompt_tokens", 0), record.get("completion_tokens", 0)
        ),
        "latency_ms": record.get("latency_ms", 0),
        "finish_reason": record.get("finish_reason"),
        "reused": reused,
    }
    if raw is not None and len(raw) > MAX_RAW_IN_RECORD:
        summary["raw_output_truncated"] = True
    return summary


def totals(calls: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = sum(c["prompt_tokens"] for c in calls)
    completion = sum(c["completion_tokens"] for c in calls)
    return {
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "cost_usd": round(sum(c["cost_usd"] for c in calls), 8),
        "latency_ms": sum(c["latency_ms"] for c in calls),
    }
