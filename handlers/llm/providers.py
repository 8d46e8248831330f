"""Chat-completion providers: an OpenAI-compatible HTTP client and a scripted one (the
request, response and errors they speak are in ``chat.py``).

Both answer a :class:`ChatRequest` with a :class:`ChatResponse` or raise a classified
error: timeouts, connection failures, 408/409/429 and 5xx are transient
(:class:`ProviderUnavailable`, with the server's ``Retry-After`` when it sent one);
other 4xx are permanent (:class:`ProviderRefused`). The API key only ever goes into the
``Authorization`` header: every text taken from a response is passed through
:func:`redact` first, so an error body that echoes the key cannot carry it into a log,
a failure message or the history.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from handlers.llm.chat import (
    MAX_ERROR_BODY,
    ChatRequest,
    ChatResponse,
    Provider,
    ProviderRefused,
    ProviderUnavailable,
    ToolCall,
    parse_retry_after,
    redact,
    response_from_json,
)
from handlers.llm.llm_settings import LlmSettings, ProviderKind, StructuredOutput

__all__ = ["OpenAIProvider", "ScriptedProvider", "provider_from_settings"]


class OpenAIProvider:
    """``POST {base_url}/chat/completions`` over aiohttp, one session per event loop."""

    name = "openai"

    def __init__(self, settings: LlmSettings) -> None:
        self.base_url = settings.base_url.rstrip("/")
        self._key = settings.api_key.get_secret_value() if settings.api_key else None
        self.timeout_s = settings.timeout_s
        self.structured = settings.structured_output

    def __repr__(self) -> str:  # never the key
        return f"<OpenAIProvider {self.base_url}>"

    def body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            **request.parameters,
        }
        schema = request.response_schema
        if schema is not None and self.structured == StructuredOutput.JSON_SCHEMA:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema["name"], "schema": schema["schema"]},
            }
        elif schema is not None and self.structured == StructuredOutput.JSON_OBJECT:
            body["response_format"] = {"type": "json_object"}
        if request.tools:
            body["tools"] = request.tools
        return body

    async def complete(self, request: ChatRequest) -> ChatResponse:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        if request.call_key:
            headers["X-Keel-Call"] = request.call_key
        url = f"{self.base_url}/chat/completions"
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        started = time.monotonic()
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, json=self.body(request), headers=headers) as resp,
            ):
                text = await resp.text()
                latency_ms = int((time.monotonic() - started) * 1000)
                request_id = resp.headers.get("x-request-id")
                if resp.status >= 400:
                    self._raise_for(resp.status, text, resp.headers.get("Retry-After"))
        except TimeoutError:
            raise ProviderUnavailable(
                f"no answer from {self.base_url} within {self.timeout_s:g}s"
            ) from None
        except aiohttp.ClientError as exc:
            message = redact(f"{type(exc).__name__}: {exc}", self._key)
            raise ProviderUnavailable(f"cannot reach {self.base_url}: {message}") from None
        try:
            return response_from_json(json.loads(text), latency_ms, request_id)
        except (ValueError, TypeError, AttributeError) as exc:
            snippet = redact(text[:MAX_ERROR_BODY], self._key)
            raise ProviderUnavailable(
                f"{self.base_url} answered a body that is not a chat completion ({exc}): "
                f"{snippet!r}"
            ) from None

    def _raise_for(self, status: int, text: str, retry_after: str | None) -> None:
        snippet = redact(" ".join(text[:MAX_ERROR_BODY].split()), self._key)
        if status in (408, 409, 429) or status >= 500:
            wait = parse_retry_after(retry_after)
            hint = "" if wait is None else f"; Retry-After {wait:g}s"
            raise ProviderUnavailable(f"provider answered {status}{hint}: {snippet}", wait)
        raise ProviderRefused(f"provider refused the call ({status}): {snippet}")


class ScriptedProvider:
    """Answers from a file, for demos and tests: no network, no key.

    The file is JSON ``{"responses": [entry, ...], "default": entry?}``. Each call takes
    the first unused entry whose ``match`` (optional) occurs in the request's messages
    (an entry with ``"keep": true`` is never used up: it answers every such request);
    when none is left, ``default``. An entry is ``{"content": str}`` or ``{"json": value}``
    or ``{"tool_calls": [{"name", "arguments"}]}``, with optional ``prompt_tokens``,
    ``completion_tokens``, and ``status``/``retry_after`` to play a failure.
    """

    name = "scripted"

    def __init__(self, script: dict[str, Any]) -> None:
        self.entries: list[dict[str, Any]] = list(script.get("responses") or [])
        self.default: dict[str, Any] | None = script.get("default")
        self.calls = 0
        self._lock = asyncio.Lock()

    @classmethod
    def from_file(cls, path: Path) -> ScriptedProvider:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ProviderRefused(f"scripted provider: cannot read {path}: {exc}") from None
        return cls(data)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        async with self._lock:
            self.calls += 1
            n = self.calls
            text = json.dumps(request.messages)
            entry = None
            for i, candidate in enumerate(self.entries):
                if candidate.get("match") is None or candidate["match"] in text:
                    entry = candidate if candidate.get("keep") else self.entries.pop(i)
                    break
            entry = entry or self.default
        if entry is None:
            raise ProviderRefused("scripted provider: no response left for this request")
        if "status" in entry:
            status = int(entry["status"])
            retry = entry.get("retry_after")
            if status in (408, 409, 429) or status >= 500:
                raise ProviderUnavailable(
                    f"provider answered {status} (scripted)",
                    None if retry is None else float(retry),
                )
            raise ProviderRefused(f"provider refused the call ({status}) (scripted)")
        content = entry.get("content")
        if "json" in entry:
            content = json.dumps(entry["json"])
        calls = tuple(
            ToolCall(
                id=f"call_{n}_{i}",
                name=str(tc["name"]),
                arguments=tc["arguments"]
                if isinstance(tc.get("arguments"), str)
                else json.dumps(tc.get("arguments", {})),
            )
            for i, tc in enumerate(entry.get("tool_calls") or [])
        )
        return ChatResponse(
            content=content,
            model=request.model,
            request_id=f"scripted-{n}",
            prompt_tokens=int(entry.get("prompt_tokens", 10)),
            completion_tokens=int(entry.get("completion_tokens", 10)),
            finish_reason="tool_calls" if calls else "stop",
            latency_ms=0,
            tool_calls=calls,
        )


def provider_from_settings(settings: LlmSettings) -> Provider:
    if settings.provider == ProviderKind.SCRIPTED:
        if settings.script is None:
            raise ProviderRefused("KEEL_LLM_PROVIDER=scripted needs KEEL_LLM_SCRIPT (a file)")
        return ScriptedProvider.from_file(settings.script)
    return OpenAIProvider(settings)
