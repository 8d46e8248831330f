"""The provider API key never reaches a log line, an event or the read model.

A run succeeds with the key, then the provider starts refusing it with a 401 whose body
echoes the key it was given (as some hosted APIs do): the permanent failure is recorded
with the key masked. Then every service log, every record of every topic of the test's
prefix (raw and decoded) and every Redis key of the prefix is scanned for the key.
"""

from __future__ import annotations

from typing import Any

import redis

from ops.fakes.openai_server import running
from orchestrator.client.client import KeelClient
from orchestrator.config.settings import TOPIC_KINDS
from orchestrator.examples.llm_invoices import app as llm_app
from tests.support import decode_all, read_topic

APP = "orchestrator.examples.llm_invoices:app"
API_KEY = "sk-keel-secret-5e1d0c9b8a7f6e5d4c3b"
GOOD = {
    "vendor": "ACME",
    "invoice_number": "INV-9",
    "total": 10.0,
    "currency": "EUR",
    "confidence": 0.9,
}


def redis_values(r: Any, prefix: str) -> list[str]:
    """Every key and value under the prefix (a client with decode_responses=True)."""
    out: list[str] = []
    for key in r.scan_iter(f"keel:{prefix}:*", count=1000):
        kind = r.type(key)
        if kind == "string":
            out.append(r.get(key) or "")
        elif kind == "hash":
            out.extend(f"{k}={v}" for k, v in r.hgetall(key).items())
        elif kind == "list":
            out.extend(r.lrange(key, 0, -1))
        elif kind == "set":
            out.extend(r.smembers(key))
        elif kind == "zset":
            out.extend(r.zrange(key, 0, -1))
        out.append(key)
    return out


def test_the_api_key_is_in_no_log_event_or_read_model(settings, services, tmp_path):
    with running() as fake:
        fake.require_key(API_KEY)
        fake.script([{"match": "doc-s1", "json": GOOD}])
        services.env.update(KEEL_LLM_BASE_URL=fake.api_root, KEEL_LLM_API_KEY=API_KEY)
        services.start("orchestrator", "--app", APP)
        services.start("worker", "--app", APP)
        client = KeelClient(settings, llm_app)
        try:
            client.start("invoice_extraction", {"document": "doc-s1"}, "secret-ok", version=1)
            assert client.wait("secret-ok", 60).status == "completed"
            fake.require_key("sk-another-key-entirely-000000")
            client.start("invoice_extraction", {"document": "doc-s2"}, "secret-refused", version=1)
            refused = client.wait("secret-refused", 60)
        finally:
            client.close()
        assert [r["authorized"] for r in fake.requests()] == [True, False]
    assert refused.status == "failed"
    assert "provider refused the call (401)" in refused.failure_reason
    assert "Incorrect API key provided: ***" in refused.failure_reason
    services.stop_all()

    findings = []
    for log in tmp_path.glob("*.log"):
        text = log.read_text(errors="replace")
        assert text, f"{log.name} is empty"
        if API_KEY in text or API_KEY[:8] in text:
            findings.append(f"log {log.name}")
    events = 0
    for kind in TOPIC_KINDS:
        records = read_topic(settings.kafka_servers, settings.topic(kind), settings.partitions)
        for record in records:
            if API_KEY.encode() in (record.value() or b""):
                findings.append(f"raw record of {kind}")
        if kind == "events":
            decoded = decode_all(records)
            events = len(decoded)
            findings += [
                f"event {e.type} of {e.workflow_id}" for e in decoded if API_KEY in repr(e)
            ]
    assert events > 10
    r = redis.Redis.from_url(settings.redis, decode_responses=True)
    values = redis_values(r, settings.topic_prefix)
    assert any("secret-ok" in v for v in values), "the read model was scanned"
    findings += ["redis" for v in values if API_KEY in v or API_KEY[:8] in v]
    assert findings == []
