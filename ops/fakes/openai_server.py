"""A local OpenAI-compatible chat-completions server for tests and demos, with fault switches.

Why it exists: Keel promises that recovery never asks a model twice for one attempt.
Only the provider's own log can prove it, so this server keeps a log of every request
it received (``GET /requests``), plays scripted answers, and misbehaves on demand the
way hosted model APIs do.

Routes:

- ``POST /v1/chat/completions`` -- an OpenAI chat completion. The answer is the first
  unused scripted entry whose ``match`` occurs in the request's messages, else the
  ``default`` entry, else 503. Faults are applied first and consume no entry.
- ``POST /script`` -- ``{"responses": [entry, ...], "default": entry?}`` replaces the
  script. An entry is ``{"content": str}``, ``{"json": value}`` or ``{"tool_calls":
  [{"name", "arguments"}]}``, with optional ``match``, ``prompt_tokens``,
  ``completion_tokens`` and ``repeat`` (times it answers; default 1).
- ``GET /faults`` / ``POST /faults`` -- switches (see :class:`Faults`).
- ``POST /config`` -- ``{"api_key": str|null}``: require this bearer token (401 else;
  the 401 body echoes the key it was given, like some hosted APIs do, so tests can
  check that Keel never passes it on).
- ``GET /requests`` -- every request received: time, ``X-Keel-Call`` header, model,
  messages, tools, whether it was authorized and what was answered. The
  ``Authorization`` header itself is never kept.
- ``POST /reset`` -- clear the log, the script, faults and config.

Run it with ``python -m ops.fakes.openai_server --port 0``; it prints
``openai fake listening on http://HOST:PORT`` (the API root is that URL + ``/v1``).
Bind it to loopback only.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from aiohttp import web

from ops.fakes import serving

__all__ = ["Faults", "OpenAIFakeClient", "create_app", "main", "running", "serve"]


@dataclass
class Faults:
    """Counters are consumed one per chat request, in this order; ``-1`` means always.

    ``latency_s`` delays the next ``latency_count`` answers; ``status_429`` answers 429
    with ``Retry-After: retry_after_s``; ``status_500`` answers 500; ``broken_body``
    answers 200 with a body that is not JSON; ``malformed`` answers content that is not
    JSON; ``wrong_schema`` answers a JSON object of the wrong shape.
    """

    latency_s: float = 0.0
    latency_count: int = 0
    status_429: int = 0
    retry_after_s: float = 1.0
    status_500: int = 0
    broken_body: int = 0
    malformed: int = 0
    wrong_schema: int = 0


@dataclass
class State:
    faults: Faults = field(default_factory=Faults)
    responses: list[dict[str, Any]] = field(default_factory=list)
    default: dict[str, Any] | None = None
    api_key: str | None = None
    log: list[dict[str, Any]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


STATE = web.AppKey("state", State)


def _take(faults: Faults, name: str) -> bool:
    left = getattr(faults, name)
    if left == 0:
        return False
    if left > 0:
        setattr(faults, name, left - 1)
    return True


def _completion(n: int, model: str, entry: dict[str, Any]) -> dict[str, Any]:
    content = entry.get("content")
    if "json" in entry:
        content = json.dumps(entry["json"])
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = entry.get("tool_calls") or []
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"]
                    if isinstance(c.get("arguments"), str)
                    else json.dumps(c.get("arguments", {})),
                },
            }
            for i, c in enumerate(calls)
        ]
    prompt_tokens = int(entry.get("prompt_tokens", 20))
    completion_tokens = int(entry.get("completion_tokens", 10))
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
    auth = request.headers.get("Authorization", "")
    given = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
    async with state.lock:
        n = len(state.log) + 1
        entry_log: dict[str, Any] = {
            "n": n,
            "at": time.time(),
            "call": request.headers.get("X-Keel-Call"),
            "model": body.get("model"),
            "messages": body.get("messages"),
            "tools": [t.get("function", {}).get("name") for t in body.get("tools") or []],
            "response_format": (body.get("response_format") or {}).get("type"),
            "authorized": state.api_key is None or given == state.api_key,
        }
        state.log.append(entry_log)
        faults = state.faults
        delay = faults.latency_s if _take(faults, "latency_count") else 0.0
        outcome: str
        entry: dict[str, Any] | None = None
        if not entry_log["authorized"]:
            outcome = "401"
        elif _take(faults, "status_429"):
            outcome = "429"
        elif _take(faults, "status_500"):
            outcome = "500"
        elif _take(faults, "broken_body"):
            outcome = "broken_body"
        elif _take(faults, "malformed"):
            outcome, entry = "malformed", {"content": "Sure! Here is the data: {vendor: ACME,"}
        elif _take(faults, "wrong_schema"):
            outcome, entry = "wrong_schema", {"json": {"unexpected": True}}
        else:
            text = json.dumps(body.get("messages"))
            for i, candidate in enumerate(state.responses):
                if candidate.get("match") is None or candidate["match"] in text:
                    entry = candidate
                    repeat = int(candidate.get("repeat", 1)) - 1
                    if repeat <= 0:
                        state.responses.pop(i)
                    else:
                        candidate["repeat"] = repeat
                    break
            outcome = "scripted"
            if entry is None and state.default is not None:
                outcome, entry = "default", state.default
            if entry is None:
                outcome = "503"
        entry_log["outcome"] = outcome
        retry_after = faults.retry_after_s
    if delay:
        await asyncio.sleep(delay)
    headers = {"x-request-id": f"req-{n}"}
    if outcome == "401":
        message = f"Incorrect API key provided: {given}"
        return web.json_response({"error": {"message": message}}, status=401, headers=headers)
    if outcome == "429":
        headers["Retry-After"] = f"{retry_after:g}"
        return web.json_response(
            {"error": {"message": "rate limited"}}, status=429, headers=headers
        )
    if outcome == "500":
        return web.json_response({"error": {"message": "overloaded"}}, status=500, headers=headers)
    if outcome == "503":
        return web.json_response(
            {"error": {"message": "no scripted response left"}}, status=503, headers=headers
        )
    if outcome == "broken_body":
        return web.Response(text='{"id": "chatcmpl-', content_type="application/json")
    assert entry is not None
    return web.json_response(_completion(n, str(body.get("model") or ""), entry), headers=headers)


async def post_script(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await request.json()
    async with state.lock:
        state.responses = [dict(e) for e in body.get("responses") or []]
        state.default = body.get("default")
    return web.json_response({"responses": len(state.responses)})


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response(asdict(request.app[STATE].faults))


async def post_faults(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await request.json()
    known = {f.name for f in fields(Faults)}
    unknown = sorted(set(body) - known)
    if unknown:
        return web.json_response({"error": f"unknown fault switches {unknown}"}, status=400)
    async with state.lock:
        for name, value in body.items():
            setattr(state.faults, name, value)
    return web.json_response(asdict(state.faults))


async def post_config(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await request.json()
    state.api_key = body.get("api_key")
    return web.json_response({"api_key_required": state.api_key is not None})


async def get_requests(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].log)


async def post_reset(request: web.Request) -> web.Response:
    state = request.app[STATE]
    async with state.lock:
        state.faults = Faults()
        state.responses, state.default, state.api_key = [], None, None
        state.log.clear()
    return web.json_response({"reset": True})


def create_app() -> web.Application:
    app = web.Application()
    app[STATE] = State()
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/script", post_script)
    app.router.add_get("/faults", get_faults)
    app.router.add_post("/faults", post_faults)
    app.router.add_post("/config", post_config)
    app.router.add_get("/requests", get_requests)
    app.router.add_post("/reset", post_reset)
    return app


class OpenAIFakeClient(serving.ControlClient):
    """Synchronous stdlib client of the fake's control routes (tests, demos)."""

    name = "fake"

    @property
    def api_root(self) -> str:
        """What ``KEEL_LLM_BASE_URL`` should be."""
        return f"{self.base_url}/v1"

    def reset(self) -> None:
        self._call("POST", "/reset", {})

    def script(
        self, responses: list[dict[str, Any]], default: dict[str, Any] | None = None
    ) -> None:
        self._call("POST", "/script", {"responses": responses, "default": default})

    def set_faults(self, **switches: Any) -> dict[str, Any]:
        return self._call("POST", "/faults", switches)  # type: ignore[no-any-return]

    def require_key(self, api_key: str | None) -> None:
        self._call("POST", "/config", {"api_key": api_key})

    def requests(self) -> list[dict[str, Any]]:
        return self._call("GET", "/requests")  # type: ignore[no-any-return]


@contextmanager
def running(timeout_s: float = 30.0) -> Iterator[OpenAIFakeClient]:
    """The fake as a real process on a free loopback port, stopped (by its PID) after."""
    with serving.running("ops.fakes.openai_server", "openai fake", timeout_s) as url:
        yield OpenAIFakeClient(url)


async def serve(host: str, port: int) -> None:
    """Run until SIGTERM/SIGINT; announce the bound address on stdout."""
    await serving.serve(create_app(), "openai fake", host, port)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    return serving.main(
        create_app, "openai fake", "Local OpenAI-compatible fake for Keel tests.", 8766, argv
    )


if __name__ == "__main__":
    sys.exit(main())
