"""A fake finance ledger: the "real external system" for Keel's fault tests and demos.

Why it exists: Keel promises that a side effect happens at most once per idempotency key,
even when responses are lost, late or refused. Logs cannot prove that; only the external
system's own books can. So Keel's tests assert on this ledger: ``effects`` per key (postings
actually created) and ``calls`` per key (requests that reached it), while fault switches make
it misbehave the way real payment and accounting APIs do (timeouts after commit, dropped
connections, 429, 500, outages).

Routes:

- ``POST /postings`` -- header ``Idempotency-Key`` and JSON ``{"account": str, "amount":
  number, ...}``; 201 with a new posting, or 200 with the same posting for a repeated key.
- ``GET /postings/{key}`` -- status query: 200 with the posting or 404. Keys may contain
  ``/``; clients percent-encode them (``LedgerClient`` does).
- ``POST /reversals`` -- JSON ``{"key": str}``: reverse the posting of that key (a
  compensation); 200 with the posting, now ``reversed``, the same for a repeated reversal
  (one reversal effect per posting), 404 when there is none.
- ``GET /ledger`` -- postings, ``calls`` and ``effects`` per key, ``total_effects``,
  ``reversals`` per key, and ``peak_in_flight``: the most ``POST /postings`` requests it
  was serving at once.
- ``GET /faults`` / ``POST /faults`` -- read / set fault switches (see ``Faults``).
- ``POST /reset`` -- clear postings, counters and faults.

State lives in memory in one process. Handlers mutate it under an ``asyncio.Lock`` with no
awaits in between, so concurrent requests see a consistent ledger.

Run it with ``python -m ops.fakes.ledger --host 127.0.0.1 --port 8765``; it prints
``ledger listening on http://HOST:PORT`` once it accepts connections.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web

from ops.fakes import serving

IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass
class Faults:
    """Fault switches. Counters are consumed by valid ``POST /postings`` requests only.

    Order of evaluation for a POST: ``down`` (503), then request validation (400), then
    ``status_429``, then ``status_500`` (neither commits), then the commit, then
    ``drop_after_commit`` (connection closed with no response), then ``delay_s`` /
    ``delay_count`` (response sent ``delay_s`` seconds after the commit).
    """

    delay_s: float = 0.0
    delay_count: int = 0
    drop_after_commit: int = 0
    status_429: int = 0
    retry_after_s: int = 1
    status_500: int = 0
    down: bool = False
    dedupe: bool = True
    #: ``POST /reversals`` answered 500 (nothing reversed) this many times: a compensation
    #: that keeps failing (``keel evaluate``'s ``compensation_failure``).
    reversals_fail: int = 0


_INT_SWITCHES = {
    "delay_count",
    "drop_after_commit",
    "status_429",
    "status_500",
    "retry_after_s",
    "reversals_fail",
}
_BOOL_SWITCHES = {"down", "dedupe"}
_FLOAT_SWITCHES = {"delay_s"}
_SWITCHES = {f.name for f in fields(Faults)}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_faults(body: Any, current: Faults) -> Faults:
    """Return ``current`` updated with the switches in ``body``; raise ``ValueError`` if bad.

    ``delay_s`` given without ``delay_count`` delays the next response only (count 1).
    """
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    unknown = sorted(set(body) - _SWITCHES)
    if unknown:
        raise ValueError(f"unknown fault switch(es): {', '.join(unknown)}")
    for name, value in body.items():
        if name in _BOOL_SWITCHES and not isinstance(value, bool):
            raise ValueError(f"{name} must be a boolean")
        if name in _INT_SWITCHES and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise ValueError(f"{name} must be a non-negative integer")
        if name in _FLOAT_SWITCHES and (not _is_number(value) or value < 0):
            raise ValueError(f"{name} must be a non-negative number")
    updated = asdict(current) | body
    if "delay_s" in body and "delay_count" not in body:
        updated["delay_count"] = 1
    updated["delay_s"] = float(updated["delay_s"])
    return Faults(**updated)


@dataclass
class LedgerState:
    """Everything the ledger knows; one instance per application."""

    postings: list[dict[str, Any]] = field(default_factory=list)
    by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    effects: dict[str, int] = field(default_factory=dict)
    reversals: dict[str, int] = field(default_factory=dict)
    reversal_failures: int = 0
    #: Requests to the service API (postings, status queries, reversals), answered or not.
    requests: int = 0
    faults: Faults = field(default_factory=Faults)
    next_id: int = 1
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def clear(self) -> None:
        """Forget postings, counters and faults (the lock stays)."""
        self.postings.clear()
        self.by_key.clear()
        self.calls.clear()
        self.effects.clear()
        self.reversals.clear()
        self.reversal_failures = 0
        self.requests = 0
        self.faults = Faults()
        self.next_id = 1
        self.peak_in_flight = self.in_flight

    def commit(self, key: str, account: str, amount: float, extra: dict[str, Any]) -> dict:
        """Create a posting for ``key`` and count the effect."""
        posting = {
            "key": key,
            "posting_id": f"p-{self.next_id:06d}",
            "account": account,
            "amount": amount,
            "created_at": datetime.now(UTC).isoformat(),
            "extra": extra,
        }
        self.next_id += 1
        self.postings.append(posting)
        self.by_key[key] = posting
        self.effects[key] = self.effects.get(key, 0) + 1
        return posting

    def snapshot(self) -> dict[str, Any]:
        """The ``GET /ledger`` document."""
        return {
            "postings": list(self.postings),
            "calls": dict(self.calls),
            "effects": dict(self.effects),
            "total_effects": sum(self.effects.values()),
            "reversals": dict(self.reversals),
            "reversal_failures": self.reversal_failures,
            "requests": self.requests,
            "peak_in_flight": self.peak_in_flight,
        }


STATE: web.AppKey[LedgerState] = web.AppKey("ledger_state", LedgerState)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def _down(retry_after_s: int) -> web.Response:
    """503 with ``Retry-After``: an outage says when to ask again."""
    return _error(503, "ledger is down", headers={"Retry-After": str(retry_after_s)})


def _validate_posting(body: Any) -> tuple[str, float, dict[str, Any]]:
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    account = body.get("account")
    amount = body.get("amount")
    if "account" not in body or "amount" not in body:
        missing = [name for name in ("account", "amount") if name not in body]
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    if not isinstance(account, str) or not account:
        raise ValueError("account must be a non-empty string")
    if not isinstance(amount, int | float) or isinstance(amount, bool):
        raise ValueError("amount must be a number")
    extra = {k: v for k, v in body.items() if k not in ("account", "amount")}
    return account, amount, extra


async def _read_json(request: web.Request) -> Any:
    text = await request.text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON body: {exc.msg}") from None


async def post_posting(request: web.Request) -> web.StreamResponse:
    """Commit a posting at most once per ``Idempotency-Key`` (unless dedupe is off),
    counting the requests served at once."""
    state = request.app[STATE]
    state.in_flight += 1
    state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
    try:
        return await _post_posting(request, state)
    finally:
        state.in_flight -= 1


async def _post_posting(request: web.Request, state: LedgerState) -> web.StreamResponse:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key:
        async with state.lock:
            state.calls[key] = state.calls.get(key, 0) + 1
    if state.faults.down:
        return _down(state.faults.retry_after_s)
    if not key:
        return _error(400, f"missing {IDEMPOTENCY_HEADER} header")
    try:
        account, amount, extra = _validate_posting(await _read_json(request))
    except ValueError as exc:
        return _error(400, str(exc))

    async with state.lock:
        faults = state.faults
        if faults.down:  # switched while the body was read
            return _down(state.faults.retry_after_s)
        if faults.status_429 > 0:
            faults.status_429 -= 1
            return _error(429, "rate limited", headers={"Retry-After": str(faults.retry_after_s)})
        if faults.status_500 > 0:
            faults.status_500 -= 1
            return _error(500, "internal error (injected)")
        existing = state.by_key.get(key) if faults.dedupe else None
        if existing is not None:
            posting, status = existing, 200
        else:
            posting, status = state.commit(key, account, amount, extra), 201
        drop = faults.drop_after_commit > 0
        if drop:
            faults.drop_after_commit -= 1
        delay = 0.0
        if not drop and faults.delay_count > 0:
            faults.delay_count -= 1
            delay = faults.delay_s

    if drop:
        # The effect is committed; the client never hears about it.
        # Closing the transport discards whatever is written after it, so the response
        # below never reaches the client, which sees a disconnect instead.
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=204)
    if delay > 0:
        await asyncio.sleep(delay)
    return web.json_response(posting, status=status)


async def get_posting(request: web.Request) -> web.Response:
    """Status query: the posting committed for a key, or 404."""
    state = request.app[STATE]
    if state.faults.down:
        return _down(state.faults.retry_after_s)
    posting = state.by_key.get(request.match_info["key"])
    if posting is None:
        return _error(404, "not found")
    return web.json_response(posting)


async def post_reversal(request: web.Request) -> web.Response:
    """Reverse a posting, once: a repeated reversal answers the same, with no new effect."""
    state = request.app[STATE]
    if state.faults.down:
        return _down(state.faults.retry_after_s)
    try:
        body = await _read_json(request)
    except ValueError as exc:
        return _error(400, str(exc))
    key = body.get("key") if isinstance(body, dict) else None
    if not isinstance(key, str) or not key:
        return _error(400, "key must be a non-empty string")
    async with state.lock:
        if state.faults.reversals_fail > 0:
            state.faults.reversals_fail -= 1
            state.reversal_failures += 1
            return _error(500, "reversal failed")
        posting = state.by_key.get(key)
        if posting is None:
            return _error(404, "not found")
        if not posting.get("reversed"):
            posting["reversed"] = True
            state.reversals[key] = state.reversals.get(key, 0) + 1
    return web.json_response(posting)


async def get_ledger(request: web.Request) -> web.Response:
    """All postings with per-key call and effect counts.

    The auditor's view, not the service API: it answers even while the ledger is down,
    so a test can watch the calls an outage receives.
    """
    return web.json_response(request.app[STATE].snapshot())


async def get_faults(request: web.Request) -> web.Response:
    """The current fault switches (answers even while down)."""
    return web.json_response(asdict(request.app[STATE].faults))


async def post_faults(request: web.Request) -> web.Response:
    """Set some fault switches; the others keep their values."""
    state = request.app[STATE]
    try:
        body = await _read_json(request)
        async with state.lock:
            state.faults = parse_faults(body, state.faults)
    except ValueError as exc:
        return _error(400, str(exc))
    return web.json_response(asdict(state.faults))


async def post_reset(request: web.Request) -> web.Response:
    """Clear postings, counters and faults."""
    state = request.app[STATE]
    async with state.lock:
        state.clear()
    return web.json_response(state.snapshot())


#: The service API's paths: every request to them is counted in ``requests`` (the books,
#: the faults and reset are the tests' own doors, not the service's).
_SERVICE_PATHS = ("/postings", "/reversals")


@web.middleware
async def _count_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    if request.path.startswith(_SERVICE_PATHS):
        request.app[STATE].requests += 1
    return await handler(request)  # type: ignore[no-any-return]


def create_app() -> web.Application:
    """A fresh ledger application with empty state."""
    app = web.Application(middlewares=[_count_requests])
    app[STATE] = LedgerState()
    app.router.add_post("/postings", post_posting)
    app.router.add_get("/postings/{key:.+}", get_posting)
    app.router.add_post("/reversals", post_reversal)
    app.router.add_get("/ledger", get_ledger)
    app.router.add_get("/faults", get_faults)
    app.router.add_post("/faults", post_faults)
    app.router.add_post("/reset", post_reset)
    return app


class LedgerClient:
    """Synchronous stdlib client for tests and demos (no asyncio needed)."""

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            payload = err.read()
            return err.code, json.loads(payload) if payload else None

    def _ok(self, method: str, path: str, body: Any = None) -> Any:
        status, payload = self._request(method, path, body)
        if status >= 400:
            raise RuntimeError(f"ledger {method} {path} answered {status}: {payload}")
        return payload

    def ledger(self) -> dict[str, Any]:
        """``GET /ledger``."""
        return self._ok("GET", "/ledger")

    def faults(self) -> dict[str, Any]:
        """``GET /faults``."""
        return self._ok("GET", "/faults")

    def set_faults(self, **switches: Any) -> dict[str, Any]:
        """``POST /faults``; returns the switches now in force."""
        return self._ok("POST", "/faults", switches)

    def reset(self) -> None:
        """``POST /reset``."""
        self._ok("POST", "/reset", {})

    def posting(self, key: str) -> dict[str, Any] | None:
        """The posting committed for ``key``, or None if there is none."""
        status, payload = self._request("GET", "/postings/" + quote(key, safe=""))
        if status == 404:
            return None
        if status >= 400:
            raise RuntimeError(f"ledger GET /postings answered {status}: {payload}")
        return payload

    def post(self, key: str, account: str, amount: float, **extra: Any) -> tuple[int, Any]:
        """``POST /postings``; returns (status, body) without raising on HTTP errors."""
        body = {"account": account, "amount": amount, **extra}
        return self._request("POST", "/postings", body, {IDEMPOTENCY_HEADER: key})


async def serve(host: str, port: int) -> None:
    """Run until SIGTERM/SIGINT; announce the bound address on stdout."""
    await serving.serve(create_app(), "ledger", host, port)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    return serving.main(
        create_app, "ledger", "Fake finance ledger for Keel fault tests.", 8765, argv
    )


if __name__ == "__main__":
    sys.exit(main())
