"""The web UI's door (connectors/ui/routes.py, sessions.py), in process: a page without a
session goes to the sign-in form, a POST without one or without the session's CSRF token is
refused, a sign-in sets a hardened cookie and keeps only the session id's hash."""

from __future__ import annotations

import asyncio
import re
import time
from types import SimpleNamespace
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from connectors.auth import Actor, Actors, hash_token
from connectors.ui.routes import OperatorUi
from connectors.ui.sessions import SessionStore, same_token
from orchestrator.records.clock import ManualClock

TOKEN = "alice-bearer-token-0123456789"
ALICE = Actor("alice", ("finance-approver",), hash_token(TOKEN))


def _ui() -> OperatorUi:
    tasks: Any = SimpleNamespace(actors=Actors({"alice": ALICE}))
    return OperatorUi(None, None, tasks, None)  # type: ignore[arg-type]


async def _with_client(check: Any) -> None:
    app = web.Application()
    ui = _ui()
    app.add_subapp("/ui", ui.application())
    async with TestClient(TestServer(app)) as client:
        await check(client, ui)


def _hidden(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def test_a_page_without_a_session_goes_to_sign_in_and_a_post_is_refused() -> None:
    async def check(client: TestClient, ui: OperatorUi) -> None:
        answer = await client.get("/ui/runs?status=waiting", allow_redirects=False)
        assert answer.status == 303
        assert answer.headers["Location"] == "/ui/signin?next=/ui/runs?status%3Dwaiting"
        answer = await client.post("/ui/dlq/x/redrive", data={"csrf": "x"})
        assert answer.status == 403
        assert "sign in first: this action needs a session" in await answer.text()
        assert answer.headers["X-Frame-Options"] == "DENY"

    asyncio.run(_with_client(check))


def test_sign_in_sets_a_hardened_cookie_and_posts_need_the_csrf_token() -> None:
    async def check(client: TestClient, ui: OperatorUi) -> None:
        form = await client.get("/ui/signin?next=/ui/health")
        pre = _hidden(await form.text(), "pre")
        wrong = await client.post("/ui/signin", data={"pre": pre, "token": "nope", "next": ""})
        assert wrong.status == 401
        assert "unknown token: sign in with your actor&#39;s bearer token" in await wrong.text()

        form = await client.get("/ui/signin")
        pre = _hidden(await form.text(), "pre")
        answer = await client.post(
            "/ui/signin",
            data={"pre": pre, "token": TOKEN, "next": "/ui/health"},
            allow_redirects=False,
        )
        assert answer.status == 303 and answer.headers["Location"] == "/ui/health"
        cookie = answer.cookies["keel_ui_session"]
        assert cookie["httponly"] is True and cookie["samesite"] == "Strict"
        assert cookie["path"] == "/ui"
        session_id = cookie.value
        # only the id's hash is kept
        assert session_id not in ui.sessions._sessions
        session = ui.sessions.get(session_id)
        assert session is not None and session.actor is ALICE

        refused = await client.post("/ui/signout", data={"csrf": "forged"})
        assert refused.status == 403
        assert "CSRF token is missing or wrong" in await refused.text()
        assert ui.sessions.get(session_id) is not None
        done = await client.post("/ui/signout", data={"csrf": session.csrf}, allow_redirects=False)
        assert done.status == 303 and done.headers["Location"] == "/ui/signin"
        assert ui.sessions.get(session_id) is None

    asyncio.run(_with_client(check))


def test_a_sign_in_form_without_its_own_cookie_is_refused() -> None:
    async def check(client: TestClient, ui: OperatorUi) -> None:
        answer = await client.post("/ui/signin", data={"pre": "guessed", "token": TOKEN})
        assert answer.status == 403
        assert "the sign-in form expired; sign in again" in await answer.text()
        assert len(ui.sessions._sessions) == 0

    asyncio.run(_with_client(check))


def test_a_sign_in_goes_on_only_to_a_page_of_the_ui() -> None:
    async def check(client: TestClient, ui: OperatorUi) -> None:
        for target in ("https://evil.example/", "//evil.example/ui/", "/tasks"):
            form = await client.get("/ui/signin")
            pre = _hidden(await form.text(), "pre")
            answer = await client.post(
                "/ui/signin",
                data={"pre": pre, "token": TOKEN, "next": target},
                allow_redirects=False,
            )
            assert answer.headers["Location"] == "/ui/runs", target

    asyncio.run(_with_client(check))


def test_sessions_expire_and_tokens_compare_whole() -> None:
    clock = ManualClock()
    store = SessionStore(ttl_s=8 * 3600, clock=clock)
    session_id, session = store.create(ALICE)
    assert store.get(session_id) is session
    assert store.get(session_id + "x") is None and store.get("") is None
    clock.advance(8 * 3600 - 1)  # a working day skipped, not slept
    assert store.get(session_id) is session
    clock.advance(1)
    assert store.get(session_id) is None
    assert same_token(session.csrf, session.csrf)
    assert not same_token(session.csrf[:-1], session.csrf)
    assert not same_token(None, session.csrf) and not same_token("", session.csrf)


def test_unauthenticated_posts_with_long_paths_do_not_stall_the_connector() -> None:
    """Issue 44: 20 concurrent ``POST /ui/runs/<8,000 chars>/cancel`` without a session made
    ``/healthz`` wait 11.6 s, the refusal's log line redacted in quadratic time. The path is
    now logged clipped, and redacted in linear time."""
    import io
    import logging

    from orchestrator.telemetry.logs import JsonFormatter

    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("keel.connector.ui")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def main() -> float:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.add_subapp("/ui", _ui().application())
        async with TestClient(TestServer(app)) as client:
            path = "/ui/runs/" + "w" * 8_000 + "/cancel"
            posts = [asyncio.create_task(client.post(path, data={"csrf": "x"})) for _ in range(20)]
            await asyncio.sleep(0)
            start = time.perf_counter()
            health = await client.get("/healthz")
            waited = time.perf_counter() - start
            assert health.status == 200
            assert {(await p).status for p in posts} == {403}
            return waited

    try:
        waited = asyncio.run(main())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert waited < 1.0
    logged = lines.getvalue().splitlines()
    assert len(logged) == 20
    assert (
        "ui POST /ui/runs/" + "w" * 191 + "... (8,016 characters): 403: sign in first"
    ) in logged[0]


def test_sessions_are_capped_per_actor_so_one_actor_signing_in_often_evicts_only_its_own() -> None:
    """Issue 44: one actor signing in 10,000 times dropped every other actor's session (the
    cap was global, oldest first)."""
    from connectors.ui.sessions import MAX_SESSIONS_PER_ACTOR

    store = SessionStore()
    bob = Actor("bob", ("keel-operator",), hash_token("bob-bearer-token-0123456789"))
    bob_id, bob_session = store.create(bob)
    alice_ids = [store.create(ALICE)[0] for _ in range(10_000)]
    assert store.get(bob_id) is bob_session
    live = [i for i in alice_ids if store.get(i) is not None]
    assert live == alice_ids[-MAX_SESSIONS_PER_ACTOR:]
    store.end(live[0])
    assert store.get(live[0]) is None
    assert store.get(store.create(ALICE)[0]) is not None and store.get(live[1]) is not None
    assert store.get(bob_id) is bob_session
