"""The connector end to end: the real `keel connector` process on loopback, real Kafka and Redis.

The helpers at the top are shared with tests/fault/test_connector_faults.py.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import redis

from connectors.signing import signature_header
from connectors.webhooks import MAX_BODY_BYTES, message_id
from orchestrator.domain.model.messages import SignalReceived
from tests.support import decode_all, histories, read_topic, wait_until

SOURCE = "documents"
SECRET = f"whsec_{uuid.uuid4().hex}"
OLD_SECRET = f"whsec_old_{uuid.uuid4().hex}"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---------------------------------------------------------------------------- helpers
def start_connector(services, *args: str, **env: str):
    """`keel connector --port 0` with the example webhook app; returns (process, base URL)."""
    env.setdefault("KEEL_WEBHOOK_DOCUMENTS_SECRETS", f"{SECRET},{OLD_SECRET}")
    proc = services.start(
        "connector", "--app", "orchestrator.examples.webhook_app:app", "--port", "0", *args, **env
    )

    def listening() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(
                f"connector exited with {proc.returncode}: {proc.log_path.read_text()[-2000:]}"
            )
        for line in proc.log_path.read_text().splitlines():
            if line.startswith("connector listening on "):
                return line.split()[3]
        return None

    return proc, wait_until(listening, 60, "the connector to listen", 0.1)


def request(method: str, url: str, body: bytes | None = None, headers=None, timeout=60):
    """(status, JSON body) of one HTTP request, without raising on 4xx/5xx."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def signed(body: bytes, secret: str = SECRET, ts: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    return {
        "Keel-Signature": signature_header([secret], ts, body),
        "Content-Type": "application/json",
    }


def deliver(url: str, event: dict[str, Any], **sign: Any) -> tuple[int, dict[str, Any]]:
    body = json.dumps(event).encode()
    return request("POST", f"{url}/webhooks/{SOURCE}", body, signed(body, **sign))


def deliver_until_accepted(url: str, event: dict[str, Any], attempts: int = 60):
    """A sender's retry loop: retry 409/503 and connection errors, one second apart."""
    seen: list[int | str] = []
    for _ in range(attempts):
        try:
            status, body = deliver(url, event)
        except OSError as exc:
            seen.append(type(exc).__name__)
        else:
            seen.append(status)
            if status < 300:
                return status, body, seen
        time.sleep(1)
    raise AssertionError(f"never accepted after {attempts} attempts: {seen}")


def added(event_id: str, wf: str, document: str) -> dict[str, Any]:
    return {"id": event_id, "type": "document.added", "workflow_id": wf, "document": document}


def requested(event_id: str, wf: str, document: Any) -> dict[str, Any]:
    return {"id": event_id, "type": "review.requested", "workflow_id": wf, "document": document}


def commands(settings) -> list:
    return decode_all(
        read_topic(settings.kafka_servers, settings.topic("commands"), settings.partitions)
    )


def commands_with_id(settings, mid: str) -> int:
    return sum(1 for env in commands(settings) if env.message_id == mid)


def dedupe_keys(settings) -> list[bytes]:
    r = redis.Redis.from_url(settings.redis)
    try:
        return list(r.scan_iter(match=f"keel:{settings.topic_prefix}:dd:*"))
    finally:
        r.close()


def delete_dedupe_keys(settings) -> int:
    """Lose the test's own dedupe markers (only keys under its prefix; never a flush)."""
    keys = dedupe_keys(settings)
    r = redis.Redis.from_url(settings.redis)
    try:
        return r.delete(*keys) if keys else 0
    finally:
        r.close()


def waiting_for_documents(client, wf: str, round_no: int) -> bool:
    entered = [
        h for h in client.projection.history(wf)
        if h["type"] == "StateEntered" and h["data"]["state"] == "needs_documents"
    ]  # fmt: skip
    return len(entered) == round_no and client.projection.status(wf) == "waiting"


def signals_received(settings, wf: str) -> list[Any]:
    events = histories(settings).get(wf, [])
    return [
        json.loads(e.payload.payload_json) for e in events if isinstance(e.payload, SignalReceived)
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- tests
def test_five_concurrent_deliveries_and_a_redelivery_after_redis_lost_the_key_signal_once(
    settings, services, client
):
    services.start("orchestrator")
    services.start("worker")
    _, url = start_connector(services)
    assert request("GET", f"{url}/healthz") == (
        200,
        {"kafka": {"ok": True}, "redis": {"ok": True}, "sources": ["documents"]},
    )
    wf = "review-hook-1"

    # a start through the webhook; its repeat is a documented 200 duplicate
    status, body = deliver(url, requested("evt-start", wf, "invoice 7"))
    assert (status, body["status"], body["workflow_id"]) == (202, "accepted", wf)
    assert deliver(url, requested("evt-start", wf, "invoice 7"))[0] == 200
    wait_until(lambda: waiting_for_documents(client, wf, 1), 60, "the first wait for documents")

    event = added("evt-1", wf, "receipt")
    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(lambda _: deliver(url, event), range(5)))
    assert sorted(status for status, _ in answers) == [200, 200, 200, 200, 202], answers
    mid = message_id(SOURCE, "evt-1")
    for status, body in answers:
        assert body == {
            "status": "accepted" if status == 202 else "duplicate",
            "duplicate": status == 200,
            "source": SOURCE,
            "event_id": "evt-1",
            "workflow_id": wf,
            "message_id": mid,
        }
    wait_until(lambda: waiting_for_documents(client, wf, 2), 60, "the second wait for documents")

    # Redis loses the marker: the redelivery reaches Kafka again, the workflow ignores it
    assert delete_dedupe_keys(settings) == 2
    assert deliver(url, event)[0] == 202
    # the same partition keeps order: once evt-2 is applied, the repeat was decided before it
    assert deliver(url, added("evt-2", wf, "contract"))[0] == 202
    done = client.wait(wf, 60)
    assert done.status == "completed"
    assert done.output == {"decision": "approved", "documents": 3}
    assert signals_received(settings, wf) == [{"document": "receipt"}, {"document": "contract"}]
    assert commands_with_id(settings, mid) == 2


def test_refused_deliveries_answer_their_status_and_write_nothing(settings, services):
    proc, url = start_connector(services)
    hook = f"{url}/webhooks/{SOURCE}"
    good = json.dumps(added("evt-r", "review-r", "receipt")).encode()
    now = int(time.time())

    cases = [
        ("forged", request("POST", hook, good, signed(good, secret="whsec_guess"))),
        ("tampered", request("POST", hook, good.replace(b"receipt", b"forgery"), signed(good))),
        ("unsigned", request("POST", hook, good, {"Content-Type": "application/json"})),
        ("stale", request("POST", hook, good, signed(good, ts=now - 301))),
        ("future", request("POST", hook, good, signed(good, ts=now + 600))),
        ("unknown source", request("POST", f"{url}/webhooks/bank", good, signed(good))),
    ]
    big = b'{"pad":"' + b"x" * MAX_BODY_BYTES + b'"}'
    cases.append(("oversized", request("POST", hook, big, signed(big))))
    for name, raw in [
        ("malformed", b'{"id": "evt-m", '),
        ("array", b"[1, 2]"),
        ("no event id", b'{"type": "document.added"}'),
        ("no route", json.dumps({"id": "evt-n", "type": "document.added"}).encode()),
        ("bad type", json.dumps({"id": "evt-t", "type": "payment"}).encode()),
        ("bad id", json.dumps(added("evt-i", "bad id/1", "x")).encode()),
        ("bad input", json.dumps(requested("evt-s", "review-s", 5)).encode()),
    ]:
        cases.append((name, request("POST", hook, raw, signed(raw))))

    got = {name: answer for name, answer in cases}
    mismatch = "Keel-Signature does not match the body under any active secret"
    window = "Keel-Signature timestamp is outside the tolerance window of 300 s (sign with the current time)"
    assert got["forged"] == (401, {"error": mismatch})
    assert got["tampered"] == (401, {"error": mismatch})
    assert got["unsigned"] == (401, {"error": "missing Keel-Signature header"})
    assert got["stale"] == (401, {"error": window})
    assert got["future"] == (401, {"error": window})
    assert got["unknown source"] == (404, {"error": "unknown webhook source 'bank'"})
    assert got["oversized"] == (
        413,
        {"error": f"body is {len(big):,} bytes; the limit is {MAX_BODY_BYTES:,} bytes"},
    )
    assert got["malformed"] == (
        400,
        {
            "error": "body is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 17"
        },
    )
    assert got["array"] == (400, {"error": "body must be a JSON object, got an array"})
    assert got["no event id"] == (
        400,
        {"error": "cannot read the event id of a 'documents' delivery: missing field 'id'"},
    )
    assert got["no route"] == (
        400,
        {"error": "cannot route a 'documents' delivery: missing field 'workflow_id'"},
    )
    assert got["bad type"] == (
        400,
        {
            "error": "cannot route a 'documents' delivery: ValueError: unknown event type 'payment'; known: document.added, review.requested"
        },
    )
    assert got["bad id"][0] == 400
    assert got["bad id"][1]["error"].startswith("invalid workflow id 'bad id/1'")
    assert got["bad input"][0] == 400
    assert "document_review" in got["bad input"][1]["error"]

    # an oversized chunked body (no Content-Length) is cut off at the limit
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request(
            "POST",
            f"/webhooks/{SOURCE}",
            body=iter([big[i : i + 65536] for i in range(0, len(big), 65536)]),
            headers=signed(big),
            encode_chunked=True,
        )
        resp = conn.getresponse()
        assert (resp.status, json.loads(resp.read())) == (
            413,
            {"error": f"body is larger than the limit of {MAX_BODY_BYTES:,} bytes"},
        )
    finally:
        conn.close()

    # the old secret is still active (rotation), so this one is accepted (a start: a signal
    # for a run that does not exist is answered 404, tests/integration/test_webhook_signal_refusals.py) ...
    assert deliver(url, requested("evt-ok", "review-r", "receipt"), secret=OLD_SECRET)[0] == 202
    # ... and it is the only record the whole test wrote
    written = commands(settings)
    assert [(e.message_id, e.workflow_id) for e in written] == [
        (message_id(SOURCE, "evt-ok"), "review-r")
    ]
    assert dedupe_keys(settings) == [f"keel:{settings.topic_prefix}:dd:{SOURCE}:evt-ok".encode()]
    log = proc.log_path.read_text()
    assert "refused" in log and SECRET not in log and OLD_SECRET not in log


def test_redis_unavailable_is_a_503_and_nothing_is_produced(settings, services):
    closed = free_port()
    _, url = start_connector(services, KEEL_REDIS_URL=f"redis://127.0.0.1:{closed}/0")
    status, body = deliver(url, added("evt-x", "review-x", "receipt"))
    assert status == 503
    assert body["error"].startswith("Redis is unavailable: ConnectionError:"), body
    status, health = request("GET", f"{url}/healthz")
    assert status == 503
    assert health["kafka"] == {"ok": True}
    assert health["redis"]["ok"] is False
    assert commands(settings) == []


def test_a_connector_without_its_secrets_refuses_to_start(settings, services):
    proc = services.start(
        "connector", "--app", "orchestrator.examples.webhook_app:app", "--port", "0",
        KEEL_WEBHOOK_DOCUMENTS_SECRETS=" , ",
    )  # fmt: skip
    assert proc.wait(timeout=60) == 1
    assert proc.log_path.read_text().strip().splitlines()[-1] == (
        "error: webhook source 'documents' needs its secrets in KEEL_WEBHOOK_DOCUMENTS_SECRETS "
        "(comma-separated), which is unset or empty"
    )
