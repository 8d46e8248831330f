"""Issue 29, item 3: producing to ``<prefix>.commands`` does not let anyone approve a task.

The attack: a raw ``DecideHumanTask`` produced straight to the commands topic, naming a
``payment_approval`` task with an invented actor and self-declared roles. Each forgery is
refused by the orchestrator (a ``CommandRefused`` in the run's history with its reason, no
dead letter) and the history holds no decision and no payment; then a decision through
``keel human-tasks decide`` (which holds the deployment's key) approves it, and the recorded ``HumanTaskDecided`` carries the token
hash and a proof that ``decision_proof`` recomputes from the event alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Producer

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CommandRefused,
    DecideHumanTask,
    Envelope,
    HumanTaskDecided,
    HumanTaskOpened,
)
from orchestrator.examples import app as examples_app
from orchestrator.io.kafka.clients import producer_config
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import now_ms
from orchestrator.trust.decision_proofs import DecisionProofs, decision_proof, derive_proof_key
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.support import histories, read_topic, wait_until

APP = "orchestrator.examples:app"
SECRET = f"task-key-{uuid.uuid4().hex}{uuid.uuid4().hex}"
TOKENS = TaskTokens(SECRET.encode(), "test")
BEARER = f"bearer-alice-{uuid.uuid4().hex}"


@pytest.fixture
def stack(settings, services, tmp_path):
    """Orchestrator and worker of the example app under ``SECRET``; (client, CLI env)."""
    actors = {"alice": {"token_sha256": hashlib.sha256(BEARER.encode()).hexdigest(),
                        "roles": ["finance-approver"]}}  # fmt: skip
    path = tmp_path / "actors.json"
    path.write_text(json.dumps(actors))
    services.env.update(KEEL_TASK_TOKEN_SECRET=SECRET, KEEL_ACTORS_FILE=str(path))
    services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    cli_env.update(services.env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    c = KeelClient(settings, examples_app)
    yield c, cli_env
    c.close()


def produce_raw(settings, wf: str, payload: Any) -> str:
    """What an attacker with produce rights does: one record, straight to the topic."""
    mid = f"forged-{uuid.uuid4().hex}"
    env: Envelope[Any] = Envelope(mid, wf, "", 0, "DecideHumanTask", now_ms(), payload, None, wf)
    producer = Producer(producer_config(settings))
    producer.produce(settings.topic("commands"), Codec().encode(env), wf.encode())
    assert producer.flush(30) == 0
    return mid


def refusal_for(settings, wf: str, mid: str) -> str:
    """The orchestrator's refusal of command ``mid``, recorded in the run's history."""

    def found() -> str | None:
        for env in histories(settings).get(wf, []):
            if isinstance(env.payload, CommandRefused) and env.causation_id == mid:
                return env.payload.reason
        return None

    return wait_until(found, 60, f"the refusal of {mid}")


def test_forged_decisions_are_refused_and_a_signed_one_approves(settings, stack):
    client, cli_env = stack
    wf = f"pay-forged-{uuid.uuid4().hex[:8]}"
    inp = {"payment_id": "P-1", "account": "acc-9", "amount": 12.5, "requested_by": "sam"}
    client.start("payment_approval", inp, wf)

    def opened() -> HumanTaskOpened | None:
        events = histories(settings).get(wf, [])
        return next((e.payload for e in events if isinstance(e.payload, HumanTaskOpened)), None)

    task = wait_until(opened, 60, "the approval task to open")
    assert task.token_hash == TOKENS.hash_of(task.task_id)
    forged = DecideHumanTask(
        task_id=task.task_id,
        token_hash="",
        decision="approve",
        actor="mallory",
        actor_roles_json='["finance-approver", "finance-lead"]',
        reason="trust me",
        operation_digest=task.operation_digest,
    )
    with_hash = replace(forged, token_hash=task.token_hash)
    alice = replace(with_hash, actor="alice", actor_roles_json='["finance-approver"]')
    wrong_key = DecisionProofs(derive_proof_key(b"not-the-deployment-key-" + b"x" * 32))
    attempts = [
        (forged, "a decision names its task id, the hash of the task's token"),
        (with_hash, "the decision carries no proof"),
        (replace(with_hash, proof="0" * 64), "the decision's proof does not verify"),
        (wrong_key.sign(wf, with_hash), "the decision's proof does not verify"),
        # a genuine proof of alice's decision, reused for mallory: the fields are bound
        (replace(with_hash, proof=DecisionProofs.from_tokens(TOKENS).sign(wf, alice).proof),
         "the decision's proof does not verify"),
    ]  # fmt: skip
    for payload, why in attempts:
        reason = refusal_for(settings, wf, produce_raw(settings, wf, payload))
        assert reason.startswith(why), reason
        assert reason.endswith("refused"), reason
        assert SECRET not in reason
    events = histories(settings)[wf]
    assert not any(isinstance(e.payload, HumanTaskDecided | ActivityScheduled) for e in events)
    dlq = read_topic(settings.kafka_servers, settings.topic("dlq"), settings.partitions, max_s=5)
    assert dlq == []
    assert client.show(wf).status == "waiting"

    # the real path: `keel human-tasks decide ID` derives the token and signs with the key
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "human-tasks", "decide", task.task_id, "--approve",
         "--operation-digest", task.operation_digest, "--actor", "alice", "--reason", "matches invoice 7", "--app", APP],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    final = client.wait(wf, 60)
    assert final.status == "completed"
    assert final.output["decided_by"] == "alice" and final.output["status"] == "paid"
    events = histories(settings)[wf]
    (decided,) = [e.payload for e in events if isinstance(e.payload, HumanTaskDecided)]
    assert decided.actor == "alice" and decided.token_hash == task.token_hash
    assert decided.actor_roles_json == '["finance-approver"]'
    key = derive_proof_key(SECRET.encode())
    assert decided.proof == decision_proof(key, wf, decided)
    assert decided.proof != decision_proof(derive_proof_key(b"y" * 40), wf, decided)
