"""A fake accounts-payable service: supplier payments and notifications, with its own books.

Why it exists: the invoice pipeline (docs/invoice-pipeline.md) schedules a payment and
notifies the supplier after each posting. Keel promises each happens at most once per
idempotency key and that a payment refused for good reverses the posting; only this
service's own books can show it.

Routes:

- ``POST /payments`` -- header ``Idempotency-Key`` and JSON ``{"posting_id", "supplier",
  "currency", "amount"}``; 201 with a new payment, 200 with the same payment for a
  repeated key; 422 (a permanent refusal, nothing recorded) when the supplier is in the
  ``refuse_payments_to`` switch.
- ``POST /notifications`` -- header ``Idempotency-Key`` and any JSON object; 201, or 200 for
  a repeated key; 500 while the ``notify_500`` counter lasts (nothing recorded).
- ``GET /books`` -- payments and notifications, ``calls`` and ``effects`` per key.
- ``GET /faults`` / ``POST /faults`` -- ``{"refuse_payments_to": [supplier, ...],
  "notify_500": n}``.
- ``POST /reset`` -- clear the books and the switches.

Run it with ``python -m ops.fakes.payables --port 0``; it prints ``payables listening on
http://HOST:PORT``.
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


@dataclass
class Faults:
    refuse_payments_to: list[str] = field(default_factory=list)
    notify_500: int = 0


@dataclass
class Books:
    payments: dict[str, dict[str, Any]] = field(default_factory=dict)
    notifications: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    effects: dict[str, int] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def snapshot(self) -> dict[str, Any]:
        return {
            "payments": dict(self.payments),
            "notifications": dict(self.notifications),
            "calls": dict(self.calls),
            "effects": dict(self.effects),
        }


BOOKS: web.AppKey[Books] = web.AppKey("payables_books", Books)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON body: {exc.msg}") from None
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return body


def _record(books: Books, kind: str, key: str, body: dict[str, Any]) -> web.Response:
    """Record ``body`` once under ``kind/key``: 201 the first time, 200 after."""
    book = books.payments if kind == "payment" else books.notifications
    existing = book.get(key)
    if existing is not None:
        return web.json_response(existing, status=200)
    entry = {"id": f"{kind[:3]}-{len(book) + 1:06d}", "key": key, **body}
    book[key] = entry
    books.effects[f"{kind}/{key}"] = books.effects.get(f"{kind}/{key}", 0) + 1
    return web.json_response(entry, status=201)


async def _keyed(request: web.Request, kind: str) -> web.Response:
    books = request.app[BOOKS]
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if not key:
        return _error(400, f"missing {IDEMPOTENCY_HEADER} header")
    try:
        body = await _body(request)
    except ValueError as exc:
        return _error(400, str(exc))
    async with books.lock:
        books.calls[f"{kind}/{key}"] = books.calls.get(f"{kind}/{key}", 0) + 1
        if kind == "payment":
            missing = [f for f in ("posting_id", "supplier", "currency", "amount") if f not in body]
            if missing:
                return _error(400, f"missing field(s): {', '.join(missing)}")
            if body["supplier"] in books.faults.refuse_payments_to:
                return _error(422, f"payments to {body['supplier']} are blocked")
        elif books.faults.notify_500 > 0:
            books.faults.notify_500 -= 1
            return _error(500, "notification service error (injected)")
        return _record(books, kind, key, body)


async def post_payment(request: web.Request) -> web.Response:
    return await _keyed(request, "payment")


async def post_notification(request: web.Request) -> web.Response:
    return await _keyed(request, "notification")


async def get_books(request: web.Request) -> web.Response:
    return web.json_response(request.app[BOOKS].snapshot())


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response(asdict(request.app[BOOKS].faults))


async def post_faults(request: web.Request) -> web.Response:
    books = request.app[BOOKS]
    try:
        body = await _body(request)
    except ValueError as exc:
        return _error(400, str(exc))
    refuse = body.get("refuse_payments_to", books.faults.refuse_payments_to)
    notify = body.get("notify_500", books.faults.notify_500)
    unknown = sorted(set(body) - {"refuse_payments_to", "notify_500"})
    if unknown:
        return _error(400, f"unknown fault switch(es): {', '.join(unknown)}")
    if not isinstance(refuse, list) or not all(isinstance(s, str) for s in refuse):
        return _error(400, "refuse_payments_to must be a list of supplier names")
    if not isinstance(notify, int) or isinstance(notify, bool) or notify < 0:
        return _error(400, "notify_500 must be a non-negative integer")
    async with books.lock:
        books.faults = Faults(list(refuse), notify)
    return web.json_response(asdict(books.faults))


async def post_reset(request: web.Request) -> web.Response:
    books = request.app[BOOKS]
    async with books.lock:
        books.payments.clear()
        books.notifications.clear()
        books.calls.clear()
        books.effects.clear()
        books.faults = Faults()
    return web.json_response(books.snapshot())


def create_app() -> web.Application:
    app = web.Application()
    app[BOOKS] = Books()
    app.router.add_post("/payments", post_payment)
    app.router.add_post("/notifications", post_notification)
    app.router.add_get("/books", get_books)
    app.router.add_get("/faults", get_faults)
    app.router.add_post("/faults", post_faults)
    app.router.add_post("/reset", post_reset)
    return app


class PayablesClient(serving.BooksClient):
    """Synchronous client for tests and demos."""

    name = "payables"


def main(argv: list[str] | None = None) -> int:
    return serving.main(create_app, "payables", "Fake accounts-payable service.", 8767, argv)


if __name__ == "__main__":
    sys.exit(main())
