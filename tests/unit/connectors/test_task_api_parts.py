"""The pure parts of the human-task API: actors and their tokens, the refusal -> status map,
task tokens, and that a bad task-token key is refused without showing it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from connectors.auth import Actors
from connectors.human_task_api import REFUSAL_STATUS, http_status
from orchestrator.client.human_task_decisions import (
    DecisionOutcome,
    DecisionStatus,
    Refusal,
    attempt_id,
    decision_message_id,
    may_pass_later,
    refusal_of,
)
from orchestrator.config.settings import load_settings
from orchestrator.domain.model.errors import ConfigError
from orchestrator.trust.human_task_tokens import TaskTokens


def _actors(tmp_path: Path, data: object, name: str = "actors.json") -> Actors:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else str(data))
    return Actors.load(path)


def test_actors_authenticate_by_the_sha256_of_their_bearer_token(tmp_path: Path) -> None:
    h = hashlib.sha256(b"s3cret-alice").hexdigest()
    actors = _actors(tmp_path, {"alice": {"token_sha256": h, "roles": ["approver"]}})
    alice = actors.authenticate("Bearer s3cret-alice")
    assert alice is not None and alice.name == "alice" and alice.roles == ("approver",)
    for header in (None, "", "Bearer", "Bearer s3cret-alicE", "Basic s3cret-alice", h):
        assert actors.authenticate(header) is None
    assert "s3cret" not in repr(alice) and h not in repr(alice)


def test_an_actors_file_in_toml_works_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    h = hashlib.sha256(b"t").hexdigest()
    toml = f'[bob]\ntoken_sha256 = "{h}"\nroles = ["lead"]\n'
    assert _actors(tmp_path, toml, "actors.toml").get("bob").roles == ("lead",)
    with pytest.raises(ConfigError, match="token_sha256 must be the 64-hex sha256"):
        _actors(tmp_path, {"bob": {"token_sha256": "plain-token", "roles": []}})
    with pytest.raises(ConfigError, match="shares its token with another actor"):
        _actors(tmp_path, {"a": {"token_sha256": h}, "b": {"token_sha256": h}})
    with pytest.raises(ConfigError, match="cannot be read"):
        Actors.load(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        ("actor 'bob' holds none of the roles that may decide human task 'T' (a); x refused", 403),
        (
            "no human task of workflow 'W' has this token; approve of human task 'by token' refused",
            404,
        ),
        ("the token does not match human task 'T'; approve refused", 404),
        ("human task 'T' expired at 5 (decision time 6); approve refused", 410),
        ("human task 'T' closed undecided (the run left state 'S'); reject refused", 410),
        ("human task 'T' was already approved by 'lena' at 5; reject refused", 409),
        ("stale approval: the approver saw operation abc…, the workflow would run def…; x", 409),
        ("the operation of human task 'T' changed since it opened (digest a… then); x", 409),
        ("the operation cannot be computed now (ConnectionError: down); x refused", 503),
        ("this orchestrator holds no task-token key to verify decisions; x refused", 503),
    ],
)
def test_each_documented_refusal_has_its_status(reason: str, status: int) -> None:
    refused = DecisionOutcome(DecisionStatus.REFUSED, refusal_of(reason), reason)
    assert http_status(refused) == status


def test_a_refusal_for_a_finished_run_is_a_conflict_only_when_the_task_was_decided() -> None:
    reason = "workflow 'W' is completed; approve of human task 'T' refused"
    assert refusal_of(reason, {"decision": "reject"}) is Refusal.CONFLICT
    assert refusal_of(reason, {"decision": None}) is Refusal.GONE


def test_only_the_connector_speaks_http_every_refusal_has_a_status() -> None:
    assert set(REFUSAL_STATUS) == set(Refusal)
    assert http_status(DecisionOutcome(DecisionStatus.PENDING)) == 202
    assert http_status(DecisionOutcome(DecisionStatus.DECIDED)) == 200
    assert http_status(DecisionOutcome(DecisionStatus.REPEATED, None, "same")) == 200


def test_the_same_request_has_the_same_message_id_and_another_does_not() -> None:
    a = decision_message_id("w/r/s#1", "alice", "approve", "d" * 64, "ok")
    assert a == decision_message_id("w/r/s#1", "alice", "approve", "d" * 64, "ok")
    assert a.startswith("decide/w/r/s#1/alice/approve/")
    assert a != decision_message_id("w/r/s#1", "alice", "approve", "e" * 64, "ok")
    approver = decision_message_id("w/r/s#1", "alice", "approve", "d" * 64, "ok", "", '["a"]')
    assert approver == decision_message_id(
        "w/r/s#1", "alice", "approve", "d" * 64, "ok", "", '["a"]'
    )
    assert approver != decision_message_id(
        "w/r/s#1", "alice", "approve", "d" * 64, "ok", "", '["a", "b"]'
    )
    assert len(decision_message_id("w" * 400, "a" * 64, "reject", "", "")) < 120


def test_task_tokens_are_an_hmac_of_the_task_id_and_history_keeps_their_sha256() -> None:
    tokens = TaskTokens(b"k" * 32, "test")
    token = tokens.issue("wf/run/approval#1")
    assert token != tokens.issue("wf/run/approval#2") and len(token) == 64
    assert tokens.hash_of("wf/run/approval#1") == hashlib.sha256(token.encode()).hexdigest()
    assert TaskTokens(b"x" * 32, "test").issue("wf/run/approval#1") != token
    with pytest.raises(ConfigError, match="shorter than 32 characters"):
        TaskTokens(b"short", "KEEL_TASK_TOKEN_SECRET")


def test_a_short_task_token_key_is_refused_without_showing_it(monkeypatch) -> None:
    monkeypatch.setenv("KEEL_TASK_TOKEN_SECRET", "hunter2-but-short")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert "KEEL_TASK_TOKEN_SECRET" in str(exc.value)
    assert "hunter2" not in str(exc.value)


def test_a_decision_body_holding_a_key_twice_is_refused_not_read_as_its_last() -> None:
    """Issue 44: ``{"decision": "reject", "decision": "approve"}`` was approved (the last key
    won), though a reader keeping the first would read a rejection."""
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from connectors.human_task_api import _read_decision

    async def decide(request: web.Request) -> web.StreamResponse:
        read = await _read_decision(request, 5.0)
        return read if isinstance(read, web.StreamResponse) else web.json_response(list(read))

    async def main() -> list[tuple[int, object]]:
        app = web.Application()
        app.router.add_post("/decide", decide)
        digest = "ab" * 32
        bodies = [
            f'{{"decision": "reject", "decision": "approve", "operation_digest": "{digest}"}}',
            f'{{"decision": "approve", "operation_digest": "{digest}"}}',
        ]
        async with TestClient(TestServer(app)) as client:
            answers = [await client.post("/decide", data=body) for body in bodies]
            return [(a.status, await a.json()) for a in answers]

    refused, approved = asyncio.run(main())
    assert refused == (400, {"error": "body holds the key 'decision' twice in one object"})
    assert approved == (200, ["approve", "", "ab" * 32, None])


def test_a_request_refused_for_a_passing_reason_is_sent_again_as_its_next_attempt() -> None:
    down = "the operation cannot be computed now (ConnectionError: down); x refused"
    role = "actor 'bob' holds none of the roles that may decide human task 'T' (a); x refused"
    assert may_pass_later(down) and not may_pass_later(role)
    assert attempt_id("m", {}) == ("m", None)
    assert attempt_id("m", {"m": role}) == ("m", role)
    assert attempt_id("m", {"m": down}) == ("m/again/1", None)
    assert attempt_id("m", {"m": down, "m/again/1": down}) == ("m/again/2", None)
    # an attempt refused for the request itself (the run moved on): that answer stands
    assert attempt_id("m", {"m": down, "m/again/1": role}) == ("m/again/1", role)
