"""The bounded agent node end to end: each bound stops it with its recorded reason, and a
tool outside the allowlist is refused and recorded (real Kafka, Redis, the OpenAI fake)."""

from __future__ import annotations

import json
import uuid

import pytest

from ops.fakes.openai_server import running
from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import DecideHumanTask, HumanTaskDecided, HumanTaskOpened
from orchestrator.examples.llm_invoices import app as llm_app
from orchestrator.trust.decision_proofs import DecisionProofs
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.support import histories, wait_until

APP = "orchestrator.examples.llm_invoices:app"
LOOKUP = {"tool_calls": [{"name": "registry_lookup", "arguments": {"vendor": "ACME"}}]}
#: The deployment's task-token key: a decision is signed with a sub-key of it.
SECRET = f"task-key-{uuid.uuid4().hex}{uuid.uuid4().hex}"
TOKENS = TaskTokens(SECRET.encode(), "test")


@pytest.fixture
def fake():
    with running() as f:
        yield f


@pytest.fixture
def llm(settings, services, fake):
    services.env.update(KEEL_LLM_BASE_URL=fake.api_root, KEEL_TASK_TOKEN_SECRET=SECRET)
    services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    c = KeelClient(settings, llm_app)
    yield c
    c.close()


def agent_result(settings, wf: str) -> dict:
    (done,) = [e for e in histories(settings)[wf] if e.type == "ActivityCompleted"]
    return json.loads(done.payload.result_json)


def test_agent_refuses_a_tool_outside_the_allowlist_and_stops_at_max_steps(settings, llm, fake):
    fake.script(
        [
            LOOKUP,
            {"tool_calls": [{"name": "wire_money", "arguments": {"amount": 1e6}}]},
        ],
        default=LOOKUP,
    )
    llm.start("vendor_check", {"vendor": "ACME"}, "agent-steps", 1)
    done = llm.wait("agent-steps", 60)
    assert done.status == "completed" and done.state == "escalate"
    assert done.output["stop_reason"] == "max_steps"
    assert done.output["flags"] == ["agent_exhausted", "tool_refused"]
    record = agent_result(settings, "agent-steps")["llm"]
    assert record["stop_reason"] == "max_steps" and len(record["steps"]) == 3
    assert record["refused_tools"] == ["wire_money"]
    first, refused, _ = record["steps"]
    assert first["decision"]["tool_calls"][0]["tool"] == "registry_lookup"
    assert first["tool_results"][0]["result"] == {"vendor": "ACME", "registered": True}
    assert first["tool_results"][0]["version"] == "1"
    assert refused["tool_results"][0]["refused"].startswith("tool 'wire_money' is not in the")
    assert "result" not in refused["tool_results"][0], "a refused tool never runs"
    assert len(fake.requests()) == 3


def test_agent_stops_at_the_token_budget(settings, llm, fake):
    fake.script([], default={**LOOKUP, "prompt_tokens": 100})
    llm.start("vendor_check", {"vendor": "ACME"}, "agent-tokens", 2)
    done = llm.wait("agent-tokens", 60)
    assert done.output["stop_reason"] == "token_budget"
    record = agent_result(settings, "agent-tokens")["llm"]
    assert record["tokens"]["total"] == 330 and len(record["steps"]) == 3


def test_agent_stops_at_the_cost_budget(settings, llm, fake):
    fake.script([], default=LOOKUP)  # 20 + 10 tokens at $10/$30 per Mtok: $0.0005 a call
    llm.start("vendor_check", {"vendor": "ACME"}, "agent-cost", 3)
    done = llm.wait("agent-cost", 60)
    assert done.output["stop_reason"] == "cost_budget"
    record = agent_result(settings, "agent-cost")["llm"]
    assert record["cost_usd"] == pytest.approx(0.001) and len(record["steps"]) == 2


def test_agent_deadline_fails_the_node_with_the_reason(settings, llm, fake):
    fake.script([], default=LOOKUP)
    fake.set_faults(latency_s=0.4, latency_count=-1)
    llm.start("vendor_check", {"vendor": "ACME"}, "agent-deadline", 4)
    done = llm.wait("agent-deadline", 60)
    assert done.status == "failed"
    events = histories(settings)["agent-deadline"]
    (failed,) = [e.payload for e in events if e.type == "ActivityFailed"]
    assert failed.failure_class == "permanent" and failed.error_type == "AgentExhausted"
    assert failed.message.startswith("agent 'vendor_check' stopped: deadline after ")
    assert done.failure_reason.startswith("vendor check failed: agent 'vendor_check' stopped")


def test_agent_answers_within_its_bounds(settings, llm, fake):
    fake.script([LOOKUP, {"json": {"vendor": "ACME", "trusted": True}}])
    llm.start("vendor_check", {"vendor": "ACME"}, "agent-ok", 1)
    done = llm.wait("agent-ok", 60)
    assert done.state == "done"
    assert done.output["verdict"] == {"vendor": "ACME", "trusted": True}
    assert done.output["stop_reason"] == "answered" and done.output["flags"] == []


def test_an_exhausted_agent_escalates_to_a_person_who_decides(settings, llm, fake):
    """v5's exhaustion path is a human task: the agent's steps and stop reason are the
    evidence, and the person's approval (not the model) ends the run."""
    fake.script([LOOKUP], default=LOOKUP)
    wf = "agent-escalated"
    llm.start("vendor_check", {"vendor": "ACME"}, wf, 5)

    def opened():
        events = histories(settings).get(wf, [])
        return next((e for e in events if isinstance(e.payload, HumanTaskOpened)), None)

    task = wait_until(opened, 60, "the escalation task to open").payload
    assert task.task_name == "review_vendor" and task.role == "vendor-manager"
    evidence = json.loads(task.evidence_json)
    assert evidence["stop_reason"] == "max_steps" and len(evidence["steps"]) == 3
    assert evidence["steps"][0]["decision"]["tool_calls"][0]["tool"] == "registry_lookup"
    assert len(fake.requests()) == 3, "the agent stops at its bound; nobody asks the model again"

    decision = DecideHumanTask(
        task.task_id, TOKENS.hash_of(task.task_id), "approve", "vera", '["vendor-manager"]',
        "checked by phone", task.operation_digest,
    )  # fmt: skip
    llm.send(wf, DecisionProofs.from_tokens(TOKENS).sign(wf, decision))
    done = llm.wait(wf, 60)
    assert done.status == "completed" and done.state == "trusted_by_person"
    assert done.output == {"vendor": "ACME", "trusted": True, "by": "vera"}
    decided = [
        e.payload for e in histories(settings)[wf] if isinstance(e.payload, HumanTaskDecided)
    ]
    assert [(d.decision, d.actor) for d in decided] == [("approve", "vera")]
    assert len(fake.requests()) == 3
