"""A fake travel booking service: hotels, flights and card charges, for the saga tests.

Why it exists: compensation promises that every committed effect of a failed run is
undone exactly once. Only the external system's own books can prove it, so the tests
assert on these: the reservations still live, and the cancellations counted per
idempotency key and per reservation. Fault switches make it misbehave like a real
booking API (errors, a response lost after the commit, cancellations that keep failing).

Routes (every write carries header ``Idempotency-Key``; a repeated key answers 200 with
what the first request did and changes nothing):

- ``POST /hotels``, ``POST /flights`` -- ``{"trip": str, ...}``: 201 ``{"reservation_id",
  "kind", "key", "trip"}``.
- ``POST /charges`` -- ``{"trip": str, "card": str, "amount": number}``: 201 ``{"charge_id",
  ...}``; 402 ``{"error": "card declined"}`` for a card ending in ``0002`` (nothing kept).
- ``POST /reservations/{id}/cancel`` -- 200 ``{"reservation_id", "cancelled": true}``; a
  reservation cancelled under another key answers 200 too, without a second cancellation.
- ``GET /requests/{key}`` -- status query: 200 with what the request with that key did, or
  404 (keys may hold ``/``: clients percent-encode them).
- ``GET /books`` -- ``live`` reservation ids, ``reservations``, ``charges``,
  ``cancellations`` per key, ``cancelled`` per reservation, ``calls`` per key.
- ``GET /faults`` / ``POST /faults`` -- see :class:`Faults`; ``POST /reset`` clears all.

Run it with ``python -m ops.fakes.booking --port 0``; it prints ``booking listening on
http://HOST:PORT`` once it accepts connections.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from ops.fakes import serving

IDEMPOTENCY_HEADER = "Idempotency-Key"
DECLINED_SUFFIX = "0002"


@dataclass
class Faults:
    """Fault switches, checked after the request is valid and before it commits.

    ``status_500``: the next N writes answer 500 (nothing committed); ``drop_after_commit``:
    the next N writes commit, then the connection closes with no answer;
    ``fail_cancels``: cancellations of these kinds (``hotel``, ``flight``) always answer
    500 (nothing committed); ``down``: every route but the books answers 503.
    """

    status_500: int = 0
    drop_after_commit: int = 0
    fail_cancels: list[str] = field(default_factory=list)
    down: bool = False


def parse_faults(body: Any, current: Faults) -> Faults:
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    unknown = sorted(set(body) - set(asdict(current)))
    if unknown:
        raise ValueError(f"unknown fault switch(es): {', '.join(unknown)}")
    for name in ("status_500", "drop_after_commit"):
        value = body.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer")
    kinds = body.get("fail_cancels", [])
    if not isinstance(kinds, list) or not set(kinds) <= {"hotel", "flight"}:
        raise ValueError("fail_cancels must be a list of 'hotel' and 'flight'")
    if not isinstance(body.get("down", False), bool):
        raise ValueError("down must be a boolean")
    return Faults(**(asdict(current) | body))


@dataclass
class Books:
    """Everything the service knows; one instance per application."""

    reservations: dict[str, dict[str, Any]] = field(default_factory=dict)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_key: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    cancellations: dict[str, int] = field(default_factory=dict)
    cancelled: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)
    next_id: int = 1
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def new_id(self, prefix: str) -> str:
        self.next_id += 1
        return f"{prefix}-{self.next_id - 1:06d}"

    def snapshot(self) -> dict[str, Any]:
        live = sorted(r for r, v in self.reservations.items() if v["status"] == "live")
        return {
            "live": live,
            "reservations": dict(self.reservations),
            "charges": dict(self.charges),
            "cancellations": dict(self.cancellations),
            "cancelled": dict(self.cancelled),
            "calls": dict(self.calls),
        }


BOOKS: web.AppKey[Books] = web.AppKey("books", Books)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.text() or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON body: {exc.msg}") from None
    if not isinstance(body, dict) or not isinstance(body.get("trip", ""), str):
        raise ValueError("body must be a JSON object with a string 'trip'")
    return body


async def _write(request: web.Request, commit: Any, cancel_kind: str | None = None) -> Any:
    """The common path of every write: key, faults, dedupe, commit, lost answers."""
    books = request.app[BOOKS]
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if not key:
        return _error(400, f"missing {IDEMPOTENCY_HEADER} header")
    try:
        body = await _body(request)
    except ValueError as exc:
        return _error(400, str(exc))
    async with books.lock:
        books.calls[key] = books.calls.get(key, 0) + 1
        f = books.faults
        if f.down:
            return _error(503, "booking service is down")
        if key in books.by_key:
            status, doc = books.by_key[key]
            return web.json_response(doc, status=200 if status < 300 else status)
        if cancel_kind is not None and cancel_kind in f.fail_cancels:
            return _error(500, f"cannot cancel {cancel_kind} reservations now (injected)")
        if f.status_500 > 0:
            f.status_500 -= 1
            return _error(500, "internal error (injected)")
        status, doc = commit(books, key, body)
        books.by_key[key] = (status, doc)
        drop = f.drop_after_commit > 0 and status < 300
        if drop:
            f.drop_after_commit -= 1
    if drop and request.transport is not None:
        request.transport.close()  # committed; the client never hears about it
        return web.Response(status=204)
    return web.json_response(doc, status=status)


def _reserve(kind: str) -> Any:
    def commit(books: Books, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        rid = books.new_id(kind[0].upper())
        doc = {"reservation_id": rid, "kind": kind, "key": key, "trip": body.get("trip", "")}
        books.reservations[rid] = {**doc, "status": "live"}
        return 201, doc

    async def handler(request: web.Request) -> Any:
        return await _write(request, commit)

    return handler


async def post_charge(request: web.Request) -> Any:
    def commit(books: Books, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        card = str(body.get("card", ""))
        if card.endswith(DECLINED_SUFFIX):
            return 402, {"error": "card declined", "key": key}
        cid = books.new_id("C")
        doc = {
            "charge_id": cid,
            "key": key,
            "trip": body.get("trip", ""),
            "amount": body.get("amount"),
        }
        books.charges[cid] = doc
        return 201, doc

    return await _write(request, commit)


async def post_cancel(request: web.Request) -> Any:
    books = request.app[BOOKS]
    rid = request.match_info["rid"]
    found = books.reservations.get(rid)
    if found is None:
        return _error(404, f"no reservation '{rid}'")

    def commit(books: Books, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        res = books.reservations[rid]
        if res["status"] == "live":
            res["status"] = "cancelled"
            books.cancellations[key] = books.cancellations.get(key, 0) + 1
            books.cancelled[rid] = books.cancelled.get(rid, 0) + 1
        return 200, {"reservation_id": rid, "cancelled": True, "key": key}

    return await _write(request, commit, cancel_kind=found["kind"])


async def get_request(request: web.Request) -> web.Response:
    books = request.app[BOOKS]
    if books.faults.down:
        return _error(503, "booking service is down")
    found = books.by_key.get(request.match_info["key"])
    if found is None:
        return _error(404, "not found")
    return web.json_response({"status": found[0], "body": found[1]})


async def get_books(request: web.Request) -> web.Response:
    """The auditor's view; answers even while down."""
    return web.json_response(request.app[BOOKS].snapshot())


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response(asdict(request.app[BOOKS].faults))


async def post_faults(request: web.Request) -> web.Response:
    books = request.app[BOOKS]
    try:
        body = json.loads(await request.text() or "{}")
        async with books.lock:
            books.faults = parse_faults(body, books.faults)
    except ValueError as exc:
        return _error(400, str(exc))
    return web.json_response(asdict(books.faults))


async def post_reset(request: web.Request) -> web.Response:
    books = request.app[BOOKS]
    async with books.lock:
        fresh = Books()
        for name in ("reservations", "charges", "by_key", "cancellations", "cancelled", "calls"):
            setattr(books, name, getattr(fresh, name))
        books.faults, books.next_id = Faults(), 1
    return web.json_response(books.snapshot())


def create_app() -> web.Application:
    app = web.Application()
    app[BOOKS] = Books()
    app.router.add_post("/hotels", _reserve("hotel"))
    app.router.add_post("/flights", _reserve("flight"))
    app.router.add_post("/charges", post_charge)
    app.router.add_post("/reservations/{rid}/cancel", post_cancel)
    app.router.add_get("/requests/{key:.+}", get_request)
    app.router.add_get("/books", get_books)
    app.router.add_get("/faults", get_faults)
    app.router.add_post("/faults", post_faults)
    app.router.add_post("/reset", post_reset)
    return app


class BookingClient(serving.BooksClient):
    """Synchronous stdlib client for tests (the books and the fault switches)."""

    name = "booking"


async def serve(host: str, port: int) -> None:
    """Run until SIGTERM/SIGINT; announce the bound address on stdout."""
    await serving.serve(create_app(), "booking", host, port)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    return serving.main(
        create_app, "booking", "Fake travel booking service for Keel tests.", 8766, argv
    )


if __name__ == "__main__":
    sys.exit(main())
