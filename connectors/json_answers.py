"""Every answer of the connector is standard JSON (docs/connector.md, "Answers").

* :func:`json_answer` encodes strictly (RFC 8259 in valid UTF-8): a value no standard reader
  takes (``NaN``, ``±Infinity``, a lone surrogate; only in records written before the input
  rule of docs/limits.md refused them) is shown as text instead of breaking the answer.
* :func:`read_body` reads a request body within a size limit and the read timeout
  (``KEEL_CONNECTOR_READ_TIMEOUT_S``): 413 or 408 otherwise.
* :func:`json_errors` turns aiohttp's own refusals (no such route, wrong method) and an
  unexpected exception into ``{"error": "<one line>"}`` answers too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from orchestrator.config.redaction import clip

__all__ = ["error_answer", "json_answer", "json_errors", "read_body", "standard_json"]

log = logging.getLogger("keel.connector")

_READ_CHUNK = 64 * 1024


def standard_json(value: Any) -> bytes:
    """``value`` as RFC 8259 JSON in UTF-8; a non-finite float becomes its name as text and
    a lone surrogate U+FFFD, so the bytes always parse."""
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except ValueError:  # a non-finite float, or (UnicodeEncodeError) a lone surrogate
        log.warning("an answer held a value that is not standard JSON; shown as text")
        return json.dumps(_standard(value), allow_nan=False, ensure_ascii=False).encode("utf-8")


def _standard(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_standard(str(k)): _standard(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_standard(v) for v in value]
    return value


def json_answer(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """An answer of ``status`` whose body is ``body`` as standard JSON."""
    return web.Response(
        body=standard_json(body),
        status=status,
        headers=headers,
        content_type="application/json",
        charset="utf-8",
    )


def error_answer(status: int, reason: str, **headers: str) -> web.Response:
    """``{"error": reason}`` with ``status``."""
    return json_answer({"error": reason}, status, headers or None)


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes | web.Response:
    """The whole body, at most ``limit`` bytes, arrived within ``timeout_s`` of the headers;
    else the 413 or 408 answer (the 408 closes the connection)."""
    size = request.content_length
    if size is not None and size > limit:
        return error_answer(413, f"body is {size:,} bytes; the limit is {limit:,} bytes")
    chunks: list[bytes] = []
    received = 0
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await request.content.read(_READ_CHUNK):
                received += len(chunk)
                if received > limit:
                    return error_answer(413, f"body is larger than the limit of {limit:,} bytes")
                chunks.append(chunk)
    except TimeoutError:
        log.info("%s %s: 408 after %d body bytes", request.method, clip(request.path), received)
        answer = error_answer(408, f"the body did not arrive within {timeout_s:g} s of the headers")
        answer.force_close()
        return answer
    return b"".join(chunks)


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own refusals (no such route, wrong method) and an unexpected exception as
    one-line JSON too."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        return error_answer(exc.status, exc.reason, **allow)
    except Exception as exc:
        log.exception("%s %s: unexpected error", request.method, clip(request.path))
        return error_answer(500, f"internal error ({type(exc).__name__}); see the connector's log")
