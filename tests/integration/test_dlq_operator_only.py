"""Issue 31, item 5: the dlq holds what needs an operator, and only that.

A refused decision (a stale approval, an actor without the roles, a task decided already)
and a signal the run does not wait for are answered to their sender and recorded in the
run's history (``CommandRefused``); a signal for a finished or unknown run (a late or
unknown webhook's command) is counted and logged, there being no open history to record
it in. None of them is a dead letter; an undecodable command still is
(docs/activities.md, "Dead letters").
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import (
    CommandRefused,
    Envelope,
    HumanTaskDecided,
    HumanTaskOpened,
    SignalWorkflow,
)
from orchestrator.examples import app as examples_app
from orchestrator.io.kafka.clients import producer_config
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import now_ms
from tests.integration.test_durable_core import keel
from tests.support import decode_all, histories, produce, read_topic, wait_until

APP = "orchestrator.examples:app"
SECRET = f"task-key-{uuid.uuid4().hex}{uuid.uuid4().hex}"
ACTORS = {
    "alice": {"token_sha256": hashlib.sha256(b"alice-bearer").hexdigest(),
              "roles": ["finance-approver"]},
    "bob": {"token_sha256": hashlib.sha256(b"bob-bearer").hexdigest(), "roles": ["intern"]},
}  # fmt: skip


@pytest.fixture
def stack(settings, services, tmp_path):
    """Orchestrator and worker of the example app; (client, CLI env, orchestrator)."""
    path = tmp_path / "actors.json"
    path.write_text(json.dumps(ACTORS))
    services.env.update(KEEL_ACTORS_FILE=str(path))
    # The history check at teardown recomputes decision proofs with the test home's key
    # file when one exists (tests/history_check.py): then the services use that key.
    home_key = settings.home / "task-token.secret"
    if home_key.exists():
        services.env.update(KEEL_TASK_TOKEN_SECRET_FILE=str(home_key))
    else:
        services.env.update(KEEL_TASK_TOKEN_SECRET=SECRET)
    orchestrator = services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    cli_env.update(services.env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    c = KeelClient(settings, examples_app)
    yield c, cli_env, orchestrator
    c.close()


def _decide(cli_env: dict[str, str], task_id: str, actor: str, *args: str):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "human-tasks", "decide", task_id,
         "--actor", actor, "--app", APP, *args],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _send_raw(settings, wf: str, payload: Any, mid: str) -> None:
    """A command as a connector sends it, without the client's checks."""
    env: Envelope[Any] = Envelope(mid, wf, "", 0, type(payload).__name__, now_ms(), payload)
    producer = Producer(producer_config(settings))
    producer.produce(settings.topic("commands"), Codec().encode(env), wf.encode())
    assert producer.flush(30) == 0


def _refusals(settings, wf: str) -> list[Envelope[Any]]:
    return [e for e in histories(settings).get(wf, []) if isinstance(e.payload, CommandRefused)]


def _dlq(settings) -> list:
    return read_topic(settings.kafka_servers, settings.topic("dlq"), settings.partitions, max_s=5)


def test_refused_decisions_are_answered_and_recorded_never_dead_lettered(settings, stack):
    client, cli_env, _ = stack
    wf = f"pay-{uuid.uuid4().hex[:8]}"
    inp = {"payment_id": "P-1", "account": "acc-9", "amount": 12.5, "requested_by": "sam"}
    client.start("payment_approval", inp, wf)

    def opened() -> HumanTaskOpened | None:
        events = histories(settings).get(wf, [])
        return next((e.payload for e in events if isinstance(e.payload, HumanTaskOpened)), None)

    task = wait_until(opened, 60, "the approval task to open")
    stale = hashlib.sha256(b"the operation as it was yesterday").hexdigest()
    approve_stale = ("--approve", "--operation-digest", stale)
    first = _decide(cli_env, task.task_id, "alice", *approve_stale)
    assert first.returncode == 1, first.stdout + first.stderr
    assert first.stderr.startswith("error: refused (conflict): stale approval: the approver saw ")
    # the same request again: the same answer, read from the recorded refusal
    again = _decide(cli_env, task.task_id, "alice", *approve_stale)
    assert (again.returncode, again.stderr) == (1, first.stderr)
    bob = _decide(cli_env, task.task_id, "bob", "--reject")
    assert bob.returncode == 1, bob.stdout + bob.stderr
    assert bob.stderr.startswith("error: refused (forbidden): actor 'bob' holds none of the roles")

    refusals = wait_until(lambda: _refusals(settings, wf)[1:] and _refusals(settings, wf), 60, "")
    assert [r.payload.command for r in refusals] == ["DecideHumanTask", "DecideHumanTask"]
    assert refusals[0].payload.reason.startswith("stale approval: the approver saw ")
    assert "actor 'bob' holds none of the roles" in refusals[1].payload.reason
    assert [r.causation_id for r in refusals] == [r.payload.command_id for r in refusals]
    assert client.show(wf).status == "waiting"

    ok = _decide(
        cli_env, task.task_id, "alice", "--approve", "--operation-digest", task.operation_digest
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert client.wait(wf, 60).status == "completed"
    # decided twice, after the run ended: answered, and nothing more is written
    twice = _decide(cli_env, task.task_id, "alice", "--reject")
    assert twice.returncode == 1, twice.stdout + twice.stderr
    assert twice.stderr.startswith(
        f"error: refused (conflict): workflow '{wf}' is completed; reject of human task "
    )
    events = histories(settings)[wf]
    assert sum(isinstance(e.payload, HumanTaskDecided) for e in events) == 1
    assert len(_refusals(settings, wf)) == 2
    assert _dlq(settings) == []


def test_stray_late_and_unknown_signals_are_no_dead_letters_and_poison_still_is(settings, stack):
    client, _, orchestrator = stack
    live, done = f"doc-{uuid.uuid4().hex[:8]}", f"three-{uuid.uuid4().hex[:8]}"
    client.start("document_review", {"document": "a"}, live)
    client.start("three_step", {"n": 1}, done)
    wait_until(lambda: client.show(live).status == "waiting", 60, "the review to wait")
    assert client.wait(done, 60).status == "completed"
    finished = len(histories(settings)[done])

    # a signal the live run does not wait for: recorded in its history, once
    stray = SignalWorkflow("no_such_signal", "{}")
    _send_raw(settings, live, stray, "webhook/stray")
    _send_raw(settings, live, stray, "webhook/stray")  # the sender retried
    [refused] = wait_until(lambda: _refusals(settings, live), 60, "the stray signal's refusal")
    assert refused.causation_id == refused.payload.command_id == "webhook/stray"
    assert refused.payload.what == "signal 'no_such_signal'"
    assert refused.payload.reason.startswith(
        f"workflow '{live}' (document_review v1) does not wait for signal 'no_such_signal'"
    )
    # a late webhook (its run finished) and an unknown one: a log line each, no history
    _send_raw(settings, done, SignalWorkflow("documents_added", "{}"), "webhook/late")
    _send_raw(settings, "nobody-here", SignalWorkflow("documents_added", "{}"), "webhook/unknown")

    def logged() -> bool:
        text = orchestrator.log_path.read_text()
        return all(
            line in text
            for line in (
                f"command webhook/late refused: workflow '{done}' is completed; "
                "signal 'documents_added' refused",
                "command webhook/unknown refused: workflow 'nobody-here' does not exist; "
                "signal 'documents_added' refused",
            )
        )

    wait_until(logged, 60, "the refusals of the late and the unknown signal, logged")
    assert len(histories(settings)[done]) == finished
    assert "nobody-here" not in histories(settings)
    assert len(_refusals(settings, live)) == 1
    assert _dlq(settings) == []

    # poison still needs an operator
    produce(settings, "commands", [(b"poisoned", b"\x00not a command")])
    [letter] = decode_all(wait_until(lambda: _dlq(settings), 60, "the poison's dead letter"))
    assert letter.workflow_id == "poisoned"
    assert letter.payload.reason.startswith("undecodable record: ")
    listed = keel(settings, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [x["workflow_id"] for x in json.loads(listed.stdout)] == ["poisoned"]
