"""The connector's answers are standard JSON whatever they carry, its middleware answers
aiohttp's refusals and unexpected errors in JSON, and a body is read within its limits."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from connectors.json_answers import json_errors, read_body, standard_json
from orchestrator.domain.model.limits import loads_bounded


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ({"a": 1.5, "b": "é", "c": [None, True]}, {"a": 1.5, "b": "é", "c": [None, True]}),
        ({"n": float("nan")}, {"n": "NaN"}),
        ({"n": [float("inf"), float("-inf")]}, {"n": ["Infinity", "-Infinity"]}),
        ({"s": "a\ud800b", "\udfff": 1}, {"s": "a\ufffdb", "\ufffd": 1}),
        ({"pair": "\U0001f600"}, {"pair": "\U0001f600"}),
    ],
)
def test_every_answer_body_is_standard_json(value, shown) -> None:
    raw = standard_json(value)
    assert loads_bounded(raw, "answer") == shown  # the input rule itself takes it


def _serve(app: web.Application, call):
    async def run():
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            return await call(client)

    return asyncio.run(run())


def test_refusals_and_unexpected_errors_are_json() -> None:
    async def boom(_request: web.Request) -> web.Response:
        raise RuntimeError("secret detail")

    app = web.Application(middlewares=[json_errors])
    app.router.add_get("/boom", boom)

    async def call(client):
        out = []
        for method, path in (("GET", "/boom"), ("GET", "/nowhere"), ("POST", "/boom")):
            resp = await client.request(method, path)
            out.append(
                (resp.status, resp.content_type, await resp.json(), resp.headers.get("Allow"))
            )
        return out

    assert _serve(app, call) == [
        (500, "application/json", {"error": "internal error (RuntimeError); see the connector's log"}, None),
        (404, "application/json", {"error": "Not Found"}, None),
        (405, "application/json", {"error": "Method Not Allowed"}, "GET,HEAD"),
    ]  # fmt: skip


def test_a_body_is_read_whole_within_its_limit_and_time() -> None:
    async def echo(request: web.Request) -> web.StreamResponse:
        body = await read_body(request, 10, 0.5)
        return body if isinstance(body, web.Response) else web.Response(body=body)

    app = web.Application()
    app.router.add_post("/", echo)

    async def slow_body():
        yield b"01234"
        await asyncio.sleep(2)
        yield b"5"

    async def call(client):
        out = []
        for data in (b"0123456789", b"0123456789x", _chunks(b"0123456789x")):
            resp = await client.post("/", data=data)
            out.append((resp.status, await resp.read()))
        resp = await client.post("/", data=slow_body())
        out.append((resp.status, json.loads(await resp.read()), resp.headers.get("Connection")))
        return out

    assert _serve(app, call) == [
        (200, b"0123456789"),
        (413, b'{"error": "body is 11 bytes; the limit is 10 bytes"}'),
        (413, b'{"error": "body is larger than the limit of 10 bytes"}'),
        (408, {"error": "the body did not arrive within 0.5 s of the headers"}, "close"),
    ]


async def _chunks(data: bytes):
    for i in range(0, len(data), 3):
        yield data[i : i + 3]
