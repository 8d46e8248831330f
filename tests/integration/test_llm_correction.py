"""Invalid model output past the repair bound becomes a human correction task
(``invoice_extraction`` v2): real orchestrator, worker and connector processes, real Kafka
and Redis, and the local OpenAI-compatible fake as the provider.

Assertions read the history (the task's evidence and schema, the recorded correction),
the connector's answers, the CLI's refusal and the fake's own request log.
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

from ops.fakes.openai_server import running
from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import HumanTaskDecided, HumanTaskOpened
from orchestrator.examples.llm_invoices import InvoiceCorrection
from orchestrator.examples.llm_invoices import app as llm_app
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.integration.test_connector import request, start_connector
from tests.support import assert_sound_history, histories, wait_until

APP = "orchestrator.examples.llm_invoices:app"
SECRET = f"task-key-{uuid.uuid4().hex}{uuid.uuid4().hex}"
BEARERS = {name: f"bearer-{name}-{uuid.uuid4().hex}" for name in ("clara", "bob")}
ROLES = {"clara": ["invoice-clerk"], "bob": ["intern"]}
RAW = "Sure! Here is the data: {vendor: ACME,"  # what the fake answers when malformed


@pytest.fixture
def stack(settings, services, tmp_path):
    actors = {
        name: {"token_sha256": hashlib.sha256(BEARERS[name].encode()).hexdigest(), "roles": r}
        for name, r in ROLES.items()
    }
    path = tmp_path / "actors.json"
    path.write_text(json.dumps(actors))
    with running() as fake:
        services.env.update(
            KEEL_LLM_BASE_URL=fake.api_root,
            KEEL_TASK_TOKEN_SECRET=SECRET,
            KEEL_ACTORS_FILE=str(path),
        )
        services.start("orchestrator", "--app", APP)
        services.start("worker", "--app", APP)
        _, url = start_connector(services, "--app", APP)
        client = KeelClient(settings, llm_app)
        try:
            yield client, url, fake
        finally:
            client.close()


def decide(url: str, token: str, actor: str, **body: Any) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {BEARERS[actor]}", "Content-Type": "application/json"}
    return request("POST", f"{url}/tasks/{token}/decision", json.dumps(body).encode(), headers)


def opened_task(settings, wf: str) -> tuple[HumanTaskOpened, int]:
    def found() -> Any:
        events = histories(settings).get(wf, [])
        return next((e for e in events if isinstance(e.payload, HumanTaskOpened)), None)

    env = wait_until(found, 90, "the correction task to open")
    return env.payload, env.seq


def test_malformed_past_the_bound_opens_a_correction_task_and_its_correction_completes_the_run(
    settings, services, stack, tmp_path
):
    client, url, fake = stack
    fake.set_faults(malformed=-1)
    wf = "fix-1"
    client.start("invoice_extraction", {"document": "doc-bad INV-77"}, wf, 2)
    task, _ = opened_task(settings, wf)
    assert len(fake.requests()) == 3, "the initial call and two repairs, then a person"

    # the evidence: every raw output, the validation errors and the input
    evidence = json.loads(task.evidence_json)
    assert evidence["raw_outputs"] == [RAW, RAW, RAW]
    assert all(e[0].startswith("the answer is not JSON") for e in evidence["errors"])
    assert evidence["document"] == "doc-bad INV-77"
    assert evidence["request_ids"] == ["req-1", "req-2", "req-3"]
    assert json.loads(task.correction_schema_json) == InvoiceCorrection.model_json_schema()
    assert task.role == "invoice-clerk" and task.task_name == "correct_extraction"
    token = TaskTokens(SECRET.encode(), "test").issue(task.task_id)

    # the inbox shows the clerk the form to fill in: the correction's JSON schema
    def shown() -> Any:
        auth = {"Authorization": f"Bearer {BEARERS['clara']}"}
        status, body = request("GET", f"{url}/tasks/{token}", None, auth)
        return body if status == 200 else None

    view = wait_until(shown, 60, "the task in the inbox")
    assert view["correction_schema"] == InvoiceCorrection.model_json_schema()
    assert view["correction"] is None and view["status"] == "open"

    # an invalid correction is refused with the orchestrator's exact reason; nothing written
    what = f"approve of human task '{task.task_id}' by 'clara'"
    bad = {"vendor": "ACME", "invoice_number": "INV-77", "total": -3, "currency": "euro"}
    status, body = decide(
        url, token, "clara", decision="approve", operation_digest=task.operation_digest,
        correction=bad,
    )  # fmt: skip
    assert status == 422, body
    assert body["error"] == (
        f"the correction of human task '{task.task_id}' is not a valid InvoiceCorrection: "
        "field 'currency': String should match pattern '^[A-Z]{3}$'; field 'total': Input "
        f"should be greater than or equal to 0; {what} refused"
    )
    status, body = decide(url, token, "clara", decision="approve",
                          operation_digest=task.operation_digest)  # fmt: skip
    assert status == 400 and body["error"] == (
        f"human task '{task.task_id}' is a correction task: an approval carries the corrected "
        f"data (JSON of InvoiceCorrection); {what} refused"
    )
    # the CLI: the same refusal, the correction read from a file
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    cli_env.update(services.env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    bad_file = tmp_path / "correction.json"
    bad_file.write_text(json.dumps({**bad, "total": 10}))
    cli = subprocess.run(
        [sys.executable, "-m", "orchestrator", "human-tasks", "decide", token, "--approve",
         "--operation-digest", task.operation_digest, "--actor", "clara", "--correction", f"@{bad_file}", "--app", APP],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert cli.stderr.strip() == (
        f"error: refused (invalid correction): the correction of human task '{task.task_id}' is not a valid "
        f"InvoiceCorrection: field 'currency': String should match pattern '^[A-Z]{{3}}$'; "
        f"{what} refused"
    )
    assert not any(isinstance(e.payload, HumanTaskDecided) for e in histories(settings)[wf])

    # a valid correction: recorded, and routed on like a valid extraction
    good = {"vendor": "ACME GmbH", "invoice_number": "INV-77", "total": 4200, "currency": "EUR"}
    status, body = decide(
        url, token, "clara", decision="approve", operation_digest=task.operation_digest,
        correction=good, reason="read the scan",
    )  # fmt: skip
    assert status == 200 and body["status"] == "decided", body
    done = client.wait(wf, 60)
    assert done.status == "completed"
    assert done.output == {
        "route": "approval",
        "total": 4200.0,
        "vendor": "ACME GmbH",
        "by": "clara",
    }
    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    (decided,) = [e.payload for e in events if isinstance(e.payload, HumanTaskDecided)]
    assert json.loads(decided.correction_json) == {**good, "total": 4200.0}
    assert decided.actor == "clara" and decided.decision == "approve"
    states = [e.payload.state for e in events if e.type == "StateEntered"]
    assert states == ["extract", "needs_correction", "corrected", "approval"]
    assert len(fake.requests()) == 3, "the correction asked the model nothing"


def test_a_rejected_correction_fails_the_run_with_who_rejected_it(settings, stack):
    client, url, fake = stack
    fake.set_faults(wrong_schema=-1)
    wf = "fix-2"
    client.start("invoice_extraction", {"document": "doc-odd"}, wf, 2)
    task, _ = opened_task(settings, wf)
    evidence = json.loads(task.evidence_json)
    assert all("does not match the schema" in e[0] for e in evidence["errors"])
    token = TaskTokens(SECRET.encode(), "test").issue(task.task_id)
    status, body = decide(url, token, "clara", decision="reject", reason="not an invoice")
    assert status == 200 and body["status"] == "decided", body
    done = client.wait(wf, 60)
    assert done.status == "failed"
    assert done.failure_reason == "the correction was rejected by clara"
