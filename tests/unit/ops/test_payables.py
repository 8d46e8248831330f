"""The fake accounts-payable service keeps its own books: one payment and one
notification per idempotency key, refusals and injected errors recorded as nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from ops.fakes.payables import create_app

PAYMENT = {"posting_id": "p-000001", "supplier": "ACME", "currency": "EUR", "amount": 12.5}


def run(scenario: Callable[[TestClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with TestClient(TestServer(create_app(), host="127.0.0.1")) as client:
            await scenario(client)

    asyncio.run(main())


async def _post(client: TestClient, path: str, key: str | None, body: Any) -> tuple[int, Any]:
    headers = {} if key is None else {"Idempotency-Key": key}
    resp = await client.post(path, json=body, headers=headers)
    return resp.status, await resp.json()


def test_a_payment_and_a_notification_happen_once_per_key() -> None:
    async def scenario(client: TestClient) -> None:
        first = await _post(client, "/payments", "pay/p-1", PAYMENT)
        again = await _post(client, "/payments", "pay/p-1", PAYMENT)
        assert (first[0], again[0]) == (201, 200) and first[1] == again[1]
        assert (await _post(client, "/notifications", "n/p-1", {"posting_id": "p-1"}))[0] == 201
        books = await (await client.get("/books")).json()
        assert books["effects"] == {"payment/pay/p-1": 1, "notification/n/p-1": 1}
        assert books["calls"] == {"payment/pay/p-1": 2, "notification/n/p-1": 1}

    run(scenario)


def test_refused_payments_and_injected_errors_record_nothing() -> None:
    async def scenario(client: TestClient) -> None:
        resp = await client.post("/faults", json={"refuse_payments_to": ["ACME"], "notify_500": 1})
        assert resp.status == 200
        status, body = await _post(client, "/payments", "pay/p-1", PAYMENT)
        assert (status, body) == (422, {"error": "payments to ACME are blocked"})
        assert (await _post(client, "/notifications", "n/1", {}))[0] == 500
        assert (await _post(client, "/notifications", "n/1", {}))[0] == 201
        assert (await _post(client, "/payments", None, PAYMENT)) == (
            400,
            {"error": "missing Idempotency-Key header"},
        )
        short = await _post(client, "/payments", "pay/p-2", {"posting_id": "p-2"})
        assert short == (400, {"error": "missing field(s): supplier, currency, amount"})
        bad = await client.post("/faults", json={"notify_500": -1})
        assert bad.status == 400
        books = await (await client.get("/books")).json()
        assert books["payments"] == {} and list(books["notifications"]) == ["n/1"]

    run(scenario)
