"""A sensitive field is sealed before anything is written and opened only for its handler.

Real orchestrator and worker processes on the real broker and Redis: after a run with a
``Sensitive[str]`` api_key, the clear key appears in no record of any topic of the test
prefix (commands, events, snapshots, tasks, dead letters), no Redis key of the prefix and
no log line, while the handler proved it received the clear key (its sha256).
"""

from __future__ import annotations

import hashlib
import json

from pydantic import SecretStr

from orchestrator.client.client import KeelClient
from orchestrator.config.settings import TOPIC_KINDS
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.trust.sealing import MASK, SEALED_KEY, new_key_entry
from tests.integration import sealed_app
from tests.integration.sealed_app import APP
from tests.support import Services, assert_sound_history, histories, read_topic

API_KEY = "sk-live-9f8e7d6c5b4a-PLAINTEXT-MARKER"


def _redis_dump(settings) -> bytes:
    """Every key of the test's prefix with its whole value, as bytes."""
    r = redis_client(settings.redis, RedisUse.READ_MODEL)
    out = []
    for key in r.scan_iter(match=f"{Keyspace(settings.topic_prefix).root}:*"):
        kind = r.type(key)
        if kind == "string":
            value = r.get(key)
        elif kind == "hash":
            value = json.dumps(r.hgetall(key))
        elif kind == "list":
            value = json.dumps(r.lrange(key, 0, -1))
        elif kind == "set":
            value = json.dumps(sorted(r.smembers(key)))
        elif kind == "zset":
            value = json.dumps(r.zrange(key, 0, -1))
        else:
            value = "<" + str(kind) + ">"
        out.append(str(key) + "=" + str(value))
    return "\n".join(out).encode()


def test_a_sensitive_api_key_reaches_the_handler_and_nothing_else(settings, tmp_path):
    key_entry = new_key_entry("k1")
    sealed_settings = settings.model_copy(update={"seal_key": SecretStr(key_entry)})
    svc = Services(settings, tmp_path, KEEL_SEAL_KEY=key_entry)
    client = KeelClient(sealed_settings, sealed_app.app)
    try:
        orch = svc.start("orchestrator", "--app", APP)
        worker = svc.start("worker", "--app", APP)
        wf = client.start("sealed_call", {"name": "acme", "api_key": API_KEY})
        done = client.wait(wf.workflow_id, 60)
        assert done.status == "completed", done

        # The handler got the clear key; the sensitive echo is shown masked.
        assert done.output == {
            "name": "acme",
            "key_sha256": hashlib.sha256(API_KEY.encode()).hexdigest(),
            "echo": MASK,
        }
        view = client.show(wf.workflow_id)
        started = next(h for h in view.history if h["type"] == "WorkflowStarted")
        assert started["data"]["input"] == {"name": "acme", "api_key": MASK}

        # The event holds the sealed envelope, which opens to the key with the key set.
        events = histories(settings)[wf.workflow_id]
        assert_sound_history(wf.workflow_id, events)
        sealed = json.loads(events[0].payload.input_json)["api_key"]
        assert set(sealed) == {SEALED_KEY, "kid"} and sealed["kid"] == "k1"
        assert client.seal_keys.unseal(sealed) == API_KEY
    finally:
        client.close()
        svc.stop_all()

    plain = API_KEY.encode()
    for kind in TOPIC_KINDS:
        records = read_topic(settings.kafka_servers, settings.topic(kind), settings.partitions)
        for rec in records:
            assert plain not in (rec.value() or b""), f"clear key in a {kind} record"
            assert plain not in (rec.key() or b""), f"clear key in a {kind} key"
    assert plain not in _redis_dump(settings), "clear key in Redis"
    for proc in (orch, worker):
        assert plain not in proc.log_path.read_bytes(), f"clear key in {proc.log_path.name}"
