"""The words of a model call, with no HTTP client: a :class:`ChatRequest`, the
:class:`ChatResponse` (and its tool calls) parsed from an OpenAI-compatible body, the two
failure classes a provider raises, the :class:`Provider` protocol, and :func:`redact`,
which masks the API key in any text taken from a response (docs/llm-nodes.md).

The LLM steps an application declares import these; the HTTP provider
(``providers.py``) and the Redis record of calls (``store.py``, a :class:`CallStore`) load
only in the process that runs a step (``environment.py``).
"""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from handlers.sdk.activity_errors import PermanentError, TransientError

__all__ = [
    "CallStore",
    "ChatRequest",
    "ChatResponse",
    "Provider",
    "ProviderRefused",
    "ProviderUnavailable",
    "ToolCall",
    "parse_retry_after",
    "redact",
    "response_from_json",
]

#: Characters of a provider's error body kept in a failure message.
MAX_ERROR_BODY = 300


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    parameters: dict[str, Any] = field(default_factory=dict)
    #: ``{"name": ..., "schema": {...}}`` of the expected JSON answer, if any.
    response_schema: dict[str, Any] | None = None
    #: OpenAI ``tools`` definitions offered to the model (agent nodes).
    tools: list[dict[str, Any]] | None = None
    #: Sent as ``X-Keel-Call`` so the provider's logs can be matched with Keel's record.
    call_key: str = ""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatResponse:
    content: str | None
    model: str
    request_id: str | None
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    latency_ms: int
    tool_calls: tuple[ToolCall, ...] = ()

    def record(self) -> dict[str, Any]:
        """The JSON record kept in the store and in the node's result."""
        return {
            "content": self.content,
            "tool_calls": [
                {"id": t.id, "name": t.name, "arguments": t.arguments} for t in self.tool_calls
            ],
            "model": self.model,
            "request_id": self.request_id,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "latency_ms": self.latency_ms,
        }


class ProviderUnavailable(TransientError):
    """Timeout, connection failure, 408/409/429 or 5xx: the same call may succeed later."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message, retry_after_s)


class ProviderRefused(PermanentError):
    """A 4xx other than 408/409/429 (bad request, auth, unknown model): fix, don't retry."""


class Provider(Protocol):
    name: str

    async def complete(self, request: ChatRequest) -> ChatResponse: ...


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` (and its first 8+ chars) masked."""
    if not secret:
        return text
    text = text.replace(secret, "***")
    if len(secret) >= 12:  # servers often echo a prefix: "Incorrect API key provided: sk-abc..."
        text = text.replace(secret[:8], "***")
    return text


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def response_from_json(data: Any, latency_ms: int, request_id: str | None) -> ChatResponse:
    """A ``ChatResponse`` from an OpenAI chat-completion body; ``ValueError`` if it is not one."""
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("choices"), list)
        or not data["choices"]
    ):
        raise ValueError("the body has no choices")
    choice = data["choices"][0]
    message = choice.get("message") or {}
    calls = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        calls.append(
            ToolCall(
                id=str(tc.get("id") or ""),
                name=str(fn.get("name") or ""),
                arguments=args if isinstance(args, str) else json.dumps(args),
            )
        )
    usage = data.get("usage") or {}
    content = message.get("content")
    return ChatResponse(
        content=content if isinstance(content, str) or content is None else json.dumps(content),
        model=str(data.get("model") or ""),
        request_id=request_id or (str(data["id"]) if data.get("id") else None),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        finish_reason=choice.get("finish_reason"),
        latency_ms=latency_ms,
        tool_calls=tuple(calls),
    )


class CallStore(Protocol):
    """Where the calls of an attempt are recorded before they are reported, so recovery
    never asks the model again (``store.LlmStore``, on Redis; docs/llm-nodes.md)."""

    async def get_call(self, attempt_key: str, index: int | str) -> dict[str, Any] | None: ...

    async def put_call(
        self, attempt_key: str, index: int | str, record: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]: ...

    async def started_at(self, attempt_key: str, now: float) -> float: ...

    async def not_before(self, attempt_key: str) -> float: ...

    async def set_not_before(self, attempt_key: str, when: float) -> None: ...

    async def cache_get(self, content_hash: str) -> dict[str, Any] | None: ...

    async def cache_put(self, content_hash: str, entry: dict[str, Any], ttl_s: int) -> None: ...
