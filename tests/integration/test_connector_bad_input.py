"""Bad JSON at the connector: what standard JSON (RFC 8259) in UTF-8 does not allow is a 400
naming the problem, for webhook and decision bodies alike, and nothing reaches Kafka; every
answer the connector gives is JSON a strict reader takes (docs/connector.md, "Answers")."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request

import pytest
import redis

from connectors.signing import signature_header
from orchestrator.domain.authoring.waits import token_hash
from orchestrator.domain.model.limits import loads_bounded
from orchestrator.io.redis.human_task_inbox import TaskKeys
from orchestrator.io.redis.keyspace import Keyspace
from tests.integration.test_connector import (
    SECRET,
    SOURCE,
    added,
    commands,
    dedupe_keys,
    requested,
    start_connector,
)

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
ALICE = "alice-bearer-token-for-the-bad-input-test"
AUTH = {"Authorization": f"Bearer {ALICE}"}
TOKEN = "ab" * 32  # a task token shape; the planted legacy task below has it

#: (a JSON value standard JSON does not allow, the 400's reason); ``{}``: the byte's position.
BAD_VALUES = [
    (b"NaN", "body is not valid JSON: body holds NaN, which is not standard JSON (RFC 8259)"),
    (b"Infinity", "body is not valid JSON: body holds Infinity, which is not standard JSON (RFC 8259)"),
    (b"-Infinity", "body is not valid JSON: body holds -Infinity, which is not standard JSON (RFC 8259)"),
    (b"1e400", "body is not valid JSON: body holds the number 1e400, which overflows a double"),
    (b'"\\ud800"', "body is not valid JSON: body holds a lone surrogate (U+D800), which is not valid Unicode"),
    (b'"\xff\xfe"', "body is not UTF-8: invalid byte at position {}"),
]  # fmt: skip


def bad_bodies(head: bytes) -> list[tuple[bytes, str]]:
    """Each bad value as the value of the last key in ``head`` (an object's fields)."""
    bodies = [(b"{" + head + b" " + value + b"}", reason) for value, reason in BAD_VALUES]
    return [(body, reason.format(body.find(b"\xff"))) for body, reason in bodies]


def http(method: str, url: str, body: bytes | None = None, headers=None):
    """(status, Content-Type, raw body) of one request, without raising on 4xx/5xx."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _NO_PROXY.open(req, timeout=60) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def strict_json(raw: bytes):
    """The value of ``raw`` by the input rule itself: refuses NaN, lone surrogates, bad UTF-8."""
    return loads_bounded(raw, "the answer", 10 * 1024 * 1024)


@pytest.fixture
def actors_file(tmp_path):
    path = tmp_path / "actors.json"
    digest = hashlib.sha256(ALICE.encode()).hexdigest()
    path.write_text(json.dumps({"alice": {"token_sha256": digest, "roles": ["approver"]}}))
    return path


def test_non_standard_json_is_a_400_naming_it_and_nothing_reaches_kafka(
    settings, services, actors_file
):
    _, url = start_connector(services, KEEL_ACTORS_FILE=str(actors_file))
    # bodies the source reads and routes, but for the one bad value
    for body, reason in bad_bodies(
        b'"id": "e1", "type": "document.added", "workflow_id": "w", "document":'
    ):
        headers = {"Keel-Signature": signature_header([SECRET], _now(), body)}
        got = http("POST", f"{url}/webhooks/{SOURCE}", body, headers)
        assert (got[0], strict_json(got[2])) == (400, {"error": reason}), body
        assert got[1] == "application/json; charset=utf-8"
    # decisions well formed but for the one bad value (their correction)
    for body, reason in bad_bodies(b'"decision": "reject", "reason": "no", "correction":'):
        got = http("POST", f"{url}/tasks/{TOKEN}/decision", body, AUTH)
        assert (got[0], strict_json(got[2])) == (400, {"error": reason}), body
        assert got[1] == "application/json; charset=utf-8"
    assert commands(settings) == []
    assert dedupe_keys(settings) == []


def test_every_answer_is_json_a_strict_reader_takes(settings, services, actors_file):
    _plant_a_legacy_task(settings)
    _, url = start_connector(services, KEEL_ACTORS_FILE=str(actors_file))
    good = json.dumps(requested("evt-ok", "review-ok", "receipt")).encode()
    signed = {"Keel-Signature": signature_header([SECRET], _now(), good)}
    late = json.dumps(added("evt-late", "no-such-run", "receipt")).encode()
    signed_late = {"Keel-Signature": signature_header([SECRET], _now(), late)}
    big = b'{"pad": "' + b"x" * 300_000 + b'"}'
    answers = {
        "signal for no run": http("POST", f"{url}/webhooks/{SOURCE}", late, signed_late),
        "healthz": http("GET", f"{url}/healthz"),
        "accepted": http("POST", f"{url}/webhooks/{SOURCE}", good, signed),
        "duplicate": http("POST", f"{url}/webhooks/{SOURCE}", good, signed),
        "unsigned": http("POST", f"{url}/webhooks/{SOURCE}", good),
        "unknown source": http("POST", f"{url}/webhooks/bank", good, signed),
        "too large": http("POST", f"{url}/webhooks/{SOURCE}", big, signed),
        "no route": http("GET", f"{url}/nowhere"),
        "wrong method": http("PUT", f"{url}/webhooks/{SOURCE}", good),
        "inbox unauthenticated": http("GET", f"{url}/tasks"),
        "inbox": http("GET", f"{url}/tasks?all=1", headers=AUTH),
        "task": http("GET", f"{url}/tasks/{TOKEN}", headers=AUTH),
        "no task": http("GET", f"{url}/tasks/{'cd' * 32}", headers=AUTH),
        "not a token": http("GET", f"{url}/tasks/nope", headers=AUTH),
        "decision unauthenticated": http("POST", f"{url}/tasks/{TOKEN}/decision", b"{}"),
        "decision not an object": http("POST", f"{url}/tasks/{TOKEN}/decision", b"[]", AUTH),
    }
    for name, (_, content_type, raw) in answers.items():
        assert content_type == "application/json; charset=utf-8", name
        strict_json(raw)  # raises unless standard JSON in UTF-8
    got = {name: (status, strict_json(raw)) for name, (status, _, raw) in answers.items()}
    assert got["accepted"][0] == 202 and got["duplicate"][0] == 200
    assert got["signal for no run"] == (
        404,
        {"error": "workflow 'no-such-run' does not exist (yet); signal 'documents_added' refused"},
    )
    assert got["unsigned"] == (401, {"error": "missing Keel-Signature header"})
    assert got["unknown source"] == (404, {"error": "unknown webhook source 'bank'"})
    assert got["too large"] == (
        413,
        {"error": f"body is {len(big):,} bytes; the limit is 262,144 bytes"},
    )
    assert got["no route"] == (404, {"error": "Not Found"})
    assert got["wrong method"] == (405, {"error": "Method Not Allowed"})
    assert got["inbox unauthenticated"] == (
        401,
        {"error": "missing or unknown bearer token (Authorization: Bearer <actor token>)"},
    )
    assert got["no task"] == (404, {"error": "no human task has this token"})
    assert got["not a token"] == (404, {"error": "no human task has this token"})
    assert got["decision not an object"] == (
        400,
        {"error": "body must be a JSON object, got an array"},
    )
    # the legacy task's values no standard reader takes are shown as text, not broken JSON
    status, inbox = got["inbox"]
    assert status == 200 and inbox["actor"] == "alice"
    [legacy] = inbox["tasks"]
    assert legacy["task_id"] == "legacy-1/r1/approval#1"
    assert legacy["evidence"] == '{"amount": NaN, "note": "\\ud800"}'  # unparsed: its text
    status, task = got["task"]
    assert status == 200
    assert task["history"] == [
        {"type": "HumanTaskOpened", "amount": "NaN", "limit": "Infinity", "note": "\ufffd"}
    ]


def _now() -> int:
    import time

    return int(time.time())


def _plant_a_legacy_task(settings) -> None:
    """A closed task as a read model written before the input rule could hold it: NaN,
    Infinity and a lone surrogate in its evidence and its history."""
    keys = TaskKeys(Keyspace(settings.topic_prefix))
    tid = "legacy-1/r1/approval#1"
    r = redis.Redis.from_url(settings.redis)
    try:
        r.hset(
            keys.task(tid),
            mapping={
                "task_id": tid,
                "task_name": "approval",
                "workflow_id": "legacy-1",
                "run_id": "r1",
                "status": "approved",
                "owner": "finance-team",
                "roles_json": '["approver"]',
                "opened_at": "1",
                "evidence_json": '{"amount": NaN, "note": "\\ud800"}',
            },
        )
        r.zadd(keys.all, {tid: 1})
        r.set(keys.token(token_hash(TOKEN)), tid)
        r.rpush(
            keys.history(tid),
            '{"type": "HumanTaskOpened", "amount": NaN, "limit": Infinity, "note": "\\ud800"}',
        )
    finally:
        r.close()
