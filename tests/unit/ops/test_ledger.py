"""The fake ledger: dedupe by key, the status query, and every fault switch.

Each in-process test serves ``create_app()`` on a real loopback socket via aiohttp's
``TestServer`` and drives it with ``asyncio.run``; one test runs the real subprocess.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import select
import socket
import subprocess
import sys
import time
import urllib.error
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from ops.fakes.ledger import LedgerClient, create_app

REPO = Path(__file__).resolve().parents[3]

Scenario = Callable[[TestClient], Awaitable[None]]


def run(scenario: Scenario) -> None:
    """Serve a fresh ledger on loopback and run ``scenario`` against it."""

    async def main() -> None:
        async with TestClient(TestServer(create_app(), host="127.0.0.1")) as client:
            await scenario(client)

    asyncio.run(main())


async def post(
    client: TestClient, key: str | None, body: Any = None, **kw: Any
) -> aiohttp.ClientResponse:
    headers = {} if key is None else {"Idempotency-Key": key}
    if body is None:
        body = {"account": "acct-1", "amount": 12.5}
    return await client.post("/postings", json=body, headers=headers, **kw)


async def ledger(client: TestClient) -> dict[str, Any]:
    resp = await client.get("/ledger")
    assert resp.status == 200
    return await resp.json()


async def faults(client: TestClient, **switches: Any) -> dict[str, Any]:
    resp = await client.post("/faults", json=switches)
    assert resp.status == 200, await resp.text()
    return await resp.json()


def test_same_key_commits_once_and_returns_the_same_posting() -> None:
    async def scenario(client: TestClient) -> None:
        first = await post(client, "wf-1/charge/1")
        assert first.status == 201
        created = await first.json()
        assert created["key"] == "wf-1/charge/1"
        assert created["posting_id"] == "p-000001"
        assert created["account"] == "acct-1"
        assert created["amount"] == 12.5
        assert created["created_at"]

        again = await post(client, "wf-1/charge/1", {"account": "other", "amount": 99})
        assert again.status == 200
        assert await again.json() == created

        other = await post(client, "wf-2/charge/1")
        assert (await other.json())["posting_id"] == "p-000002"

        book = await ledger(client)
        assert book["calls"] == {"wf-1/charge/1": 2, "wf-2/charge/1": 1}
        assert book["effects"] == {"wf-1/charge/1": 1, "wf-2/charge/1": 1}
        assert book["total_effects"] == 2
        assert [p["posting_id"] for p in book["postings"]] == ["p-000001", "p-000002"]

    run(scenario)


def test_missing_idempotency_key_is_400_with_exact_message() -> None:
    async def scenario(client: TestClient) -> None:
        resp = await post(client, None)
        assert resp.status == 400
        assert await resp.json() == {"error": "missing Idempotency-Key header"}
        assert (await ledger(client))["total_effects"] == 0

    run(scenario)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "invalid JSON body"),
        (b"[1, 2]", "body must be a JSON object"),
        (b'{"amount": 1}', "missing field(s): account"),
        (b'{"account": "a"}', "missing field(s): amount"),
        (b'{"account": "", "amount": 1}', "account must be a non-empty string"),
        (b'{"account": "a", "amount": "1"}', "amount must be a number"),
        (b'{"account": "a", "amount": true}', "amount must be a number"),
    ],
)
def test_invalid_bodies_are_400_and_commit_nothing(raw: bytes, message: str) -> None:
    async def scenario(client: TestClient) -> None:
        resp = await client.post(
            "/postings",
            data=raw,
            headers={"Idempotency-Key": "k", "Content-Type": "application/json"},
        )
        assert resp.status == 400
        assert (await resp.json())["error"].startswith(message)
        assert (await ledger(client))["effects"] == {}

    run(scenario)


def test_status_query_finds_committed_postings_only() -> None:
    async def scenario(client: TestClient) -> None:
        created = await (await post(client, "a%2Fb/step/3")).json()
        found = await client.get("/postings/a%252Fb%2Fstep%2F3")
        assert found.status == 200
        assert await found.json() == created
        missing = await client.get("/postings/nope")
        assert missing.status == 404
        assert await missing.json() == {"error": "not found"}

    run(scenario)


def test_429_has_retry_after_and_commits_nothing() -> None:
    async def scenario(client: TestClient) -> None:
        await faults(client, status_429=1)
        limited = await post(client, "k")
        assert limited.status == 429
        assert limited.headers["Retry-After"] == "1"
        assert (await ledger(client))["effects"] == {}
        assert (await client.get("/postings/k")).status == 404

        retried = await post(client, "k")
        assert retried.status == 201
        book = await ledger(client)
        assert book["calls"] == {"k": 2}
        assert book["effects"] == {"k": 1}

    run(scenario)


def test_500_commits_nothing() -> None:
    async def scenario(client: TestClient) -> None:
        await faults(client, status_500=2)
        assert (await post(client, "k")).status == 500
        assert (await post(client, "k")).status == 500
        assert (await ledger(client))["effects"] == {}
        assert (await post(client, "k")).status == 201
        book = await ledger(client)
        assert book["calls"] == {"k": 3}
        assert book["effects"] == {"k": 1}

    run(scenario)


def test_drop_after_commit_loses_the_response_but_not_the_effect() -> None:
    async def scenario(client: TestClient) -> None:
        await faults(client, drop_after_commit=1)
        with pytest.raises(aiohttp.ClientConnectionError):
            resp = await post(client, "k")
            await resp.read()
        found = await client.get("/postings/k")
        assert found.status == 200
        assert (await found.json())["posting_id"] == "p-000001"

        retried = await post(client, "k")
        assert retried.status == 200
        assert (await retried.json())["posting_id"] == "p-000001"
        book = await ledger(client)
        assert book["calls"] == {"k": 2}
        assert book["effects"] == {"k": 1}
        assert (await (await client.get("/faults")).json())["drop_after_commit"] == 0

    run(scenario)


def test_delay_answers_late_after_committing() -> None:
    async def scenario(client: TestClient) -> None:
        await faults(client, delay_s=0.5, delay_count=2)
        with pytest.raises(asyncio.TimeoutError):
            await post(client, "k", timeout=aiohttp.ClientTimeout(total=0.1))
        assert (await client.get("/postings/k")).status == 200

        started = time.monotonic()
        patient = await post(client, "k")
        assert time.monotonic() - started >= 0.45
        assert patient.status == 200

        started = time.monotonic()
        assert (await post(client, "k2")).status == 201
        assert time.monotonic() - started < 0.45
        assert (await ledger(client))["effects"] == {"k": 1, "k2": 1}

    run(scenario)


def test_down_answers_503_to_post_and_get() -> None:
    async def scenario(client: TestClient) -> None:
        await post(client, "before")
        await faults(client, down=True)
        assert (await post(client, "k")).status == 503
        assert (await client.get("/postings/before")).status == 503
        assert (await client.get("/ledger")).status == 200  # the auditor's view stays up
        assert (await (await client.get("/faults")).json())["down"] is True

        await faults(client, down=False)
        book = await ledger(client)
        assert book["effects"] == {"before": 1}
        assert book["calls"] == {"before": 1, "k": 1}

    run(scenario)


def test_peak_in_flight_counts_postings_served_at_once() -> None:
    async def scenario(client: TestClient) -> None:
        await faults(client, delay_s=0.3, delay_count=3)
        await asyncio.gather(*(post(client, f"k{i}") for i in range(3)))
        await post(client, "k3")
        assert (await ledger(client))["peak_in_flight"] == 3
        assert (await client.post("/reset")).status == 200
        await post(client, "k4")
        assert (await ledger(client))["peak_in_flight"] == 1

    run(scenario)


def test_dedupe_off_creates_an_effect_per_call() -> None:
    async def scenario(client: TestClient) -> None:
        await faults(client, dedupe=False)
        first = await post(client, "k")
        second = await post(client, "k")
        assert (first.status, second.status) == (201, 201)
        assert (await first.json())["posting_id"] != (await second.json())["posting_id"]
        book = await ledger(client)
        assert book["effects"] == {"k": 2}
        assert book["total_effects"] == 2

    run(scenario)


def test_faults_reject_bad_switches() -> None:
    async def scenario(client: TestClient) -> None:
        for body in ({"nope": 1}, {"status_500": -1}, {"down": 1}, {"delay_s": "x"}, [1]):
            resp = await client.post("/faults", json=body)
            assert resp.status == 400, body
        current = await (await client.get("/faults")).json()
        assert current == {
            "delay_s": 0.0,
            "delay_count": 0,
            "drop_after_commit": 0,
            "status_429": 0,
            "retry_after_s": 1,
            "status_500": 0,
            "down": False,
            "dedupe": True,
            "reversals_fail": 0,
        }

    run(scenario)


def test_reset_clears_postings_counters_and_faults() -> None:
    async def scenario(client: TestClient) -> None:
        await post(client, "k")
        await faults(client, status_500=5, dedupe=False)
        assert (await client.post("/reset")).status == 200
        assert await ledger(client) == {
            "postings": [],
            "calls": {},
            "effects": {},
            "total_effects": 0,
            "reversals": {},
            "reversal_failures": 0,
            "requests": 0,
            "peak_in_flight": 0,
        }
        assert (await (await client.get("/faults")).json())["status_500"] == 0
        created = await post(client, "k")
        assert created.status == 201
        assert (await created.json())["posting_id"] == "p-000001"

    run(scenario)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError("ledger did not announce itself in time")
    return proc.stdout.readline().strip()


def test_runner_subprocess_with_sync_client() -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops.fakes.ledger", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        assert _wait_for_line(proc, 20) == f"ledger listening on {base}"
        client = LedgerClient(base)
        client.reset()
        assert client.posting("wf-1/pay/1") is None

        status, created = client.post("wf-1/pay/1", "acct-9", 100)
        assert status == 201
        status, again = client.post("wf-1/pay/1", "acct-9", 100)
        assert (status, again) == (200, created)
        assert client.posting("wf-1/pay/1") == created

        assert client.set_faults(drop_after_commit=1)["drop_after_commit"] == 1
        with pytest.raises((ConnectionError, http.client.HTTPException, urllib.error.URLError)):
            client.post("wf-2/pay/1", "acct-9", 5)
        assert client.posting("wf-2/pay/1") is not None

        book = client.ledger()
        assert book["effects"] == {"wf-1/pay/1": 1, "wf-2/pay/1": 1}
        assert book["calls"] == {"wf-1/pay/1": 2, "wf-2/pay/1": 1}
        client.reset()
        assert client.ledger()["total_effects"] == 0
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_reversal_is_one_effect_however_often_it_is_asked() -> None:
    async def scenario(client: TestClient) -> None:
        await post(client, "k")
        assert (await client.post("/reversals", json={"key": "nope"})).status == 404
        for _ in range(3):
            resp = await client.post("/reversals", json={"key": "k"})
            assert resp.status == 200 and (await resp.json())["reversed"] is True
        bad = await client.post("/reversals", json={"key": ""})
        assert bad.status == 400
        assert (await bad.json())["error"] == "key must be a non-empty string"
        books = await ledger(client)
        assert books["reversals"] == {"k": 1} and books["effects"] == {"k": 1}

    run(scenario)


def test_reversals_fail_answers_500_and_reverses_nothing_until_spent() -> None:
    async def scenario(client: TestClient) -> None:
        await post(client, "k")
        await faults(client, reversals_fail=2)
        for _ in range(2):
            resp = await client.post("/reversals", json={"key": "k"})
            assert resp.status == 500 and (await resp.json())["error"] == "reversal failed"
        books = await ledger(client)
        assert books["reversals"] == {} and books["reversal_failures"] == 2
        assert books["requests"] == 3  # the posting and two reversals, not the books' reads
        resp = await client.post("/reversals", json={"key": "k"})
        assert resp.status == 200 and (await resp.json())["reversed"] is True
        assert (await ledger(client))["reversals"] == {"k": 1}

    run(scenario)
