"""Recovery never resamples a model: SIGKILL the worker after the model answered and the
orchestrator after the node completed; the provider's own log shows no second request.

The provider is the local OpenAI fake. Its script would answer a second request for the
same invoice differently (another total, hence another branch), so a resampling would
show both in its request log and in the route the run took.
"""

from __future__ import annotations

import json

import pytest
import redis

from ops.fakes.openai_server import running
from orchestrator.client.client import KeelClient
from orchestrator.examples.llm_invoices import app as llm_app
from tests.support import assert_sound_history, histories, wait_until

APP = "orchestrator.examples.llm_invoices:app"


def answer(total: float) -> dict:
    fields = {"vendor": "ACME", "invoice_number": "I-1", "total": total, "currency": "EUR"}
    return {"json": {**fields, "confidence": 0.97}}


@pytest.fixture
def fake():
    with running() as f:
        # The first answer routes to "approval"; a resampled one would route to "auto".
        f.script([{"match": "doc-k", **answer(4200.0)}, {"match": "doc-k", **answer(50.0)}])
        yield f


@pytest.fixture
def client(settings):
    c = KeelClient(settings, llm_app)
    yield c
    c.close()


def test_worker_killed_after_the_answer_was_stored_does_not_ask_again(
    settings, services, fake, client
):
    services.env.update(KEEL_LLM_BASE_URL=fake.api_root)
    services.start("orchestrator", "--app", APP)
    worker = services.start(
        "worker",
        "--app",
        APP,
        KEEL_ADAPTER_HOOKS="ops.faults.service_faults:pause_after_store",
        KEEL_FAULT_PAUSE_S="120",
    )
    client.start("invoice_extraction", {"document": "doc-k"}, "kill-w", version=1)
    key = "kill-w/llm.extract_invoice/1"
    stored = f"keel:{settings.topic_prefix}:llm:call:0:{key}"
    r = redis.Redis.from_url(settings.redis, decode_responses=True)
    wait_until(lambda: r.exists(stored), 60, "the raw response to be stored")
    assert len(fake.requests()) == 1
    wait_until(lambda: "fault: pausing" in worker.log_path.read_text(), 30, "the worker to pause")
    services.kill(worker)  # SIGKILL: the answer is stored, the report was never sent
    assert client.projection.get("kill-w")["status"] == "running"
    services.start("worker", "--app", APP)
    done = client.wait("kill-w", 120)
    assert done.status == "completed"
    assert done.output["route"] == "approval", "the same branch as the first answer"
    requests = fake.requests()
    assert [q["call"] for q in requests] == [f"{key}#0"], "no second request for the attempt"
    events = histories(settings)["kill-w"]
    assert_sound_history("kill-w", events)
    (completed,) = [e for e in events if e.type == "ActivityCompleted"]
    (call,) = json.loads(completed.payload.result_json)["llm"]["calls"]
    assert call["reused"] is True and call["request_id"] == "req-1"
    assert json.loads(call["raw_output"])["total"] == 4200.0


def test_orchestrator_killed_after_the_node_completed_makes_no_new_request(
    settings, services, fake, client
):
    services.env.update(KEEL_LLM_BASE_URL=fake.api_root)
    orchestrator = services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    client.start("invoice_extraction_confirm", {"document": "doc-k"}, "kill-o")

    def waiting_for_confirm() -> bool:
        found = client.projection.get("kill-o")
        return found is not None and found["state"] == "confirm"

    wait_until(waiting_for_confirm, 60, "the LLM node to complete")
    services.kill(orchestrator)
    services.start("orchestrator", "--app", APP)
    client.signal("kill-o", "confirm", {"by": "test"})
    done = client.wait("kill-o", 120)
    assert done.status == "completed" and done.output["route"] == "approval"
    assert len(fake.requests()) == 1, "recovery replayed the recorded result"
    events = histories(settings)["kill-o"]
    assert_sound_history("kill-o", events)
    assert [e.type for e in events].count("ActivityScheduled") == 1
    assert [e.type for e in events].count("ActivityCompleted") == 1
