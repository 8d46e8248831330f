"""The invoice pipeline on the real stack (docs/invoice-pipeline.md): the sample invoices
through a real orchestrator and worker, the OpenAI fake playing the scripted model, the
fake ledger and accounts payable with their fault switches, and people deciding the
tasks the runs open.

Every branch ends in the outcome its sample names, and the external systems' own books
show one posting per posted invoice (the same file three times and a second file of one
invoice included), the reversed posting of the invoice whose payment was refused, and
one payment and one notification per posting that stands.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ops.fakes import serving
from ops.fakes.ledger import LedgerClient
from ops.fakes.openai_server import running as model_running
from ops.fakes.payables import PayablesClient
from orchestrator.client.client import KeelClient
from orchestrator.client.human_task_decisions import DecisionStatus, TaskDesk
from orchestrator.examples.invoice_pipeline import app as pipeline_app
from orchestrator.examples.invoice_pipeline.pipeline_models import ApprovalSla, submission
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.integration.test_connector import request, signed, start_connector
from tests.support import assert_sound_history, histories, wait_until

APP = "orchestrator.examples.invoice_pipeline:app"
SAMPLES = Path(__file__).resolve().parents[2] / "ops" / "demo_data" / "invoices"
#: The expiring approval's SLA: escalated after 2 s, expired after 5 s.
SHORT_SLA = ApprovalSla(due_s=1, escalate_after_s=2, expires_after_s=5)
CLERK, APPROVER = ("carla", ["invoice-clerk"]), ("fiona", ["finance-approver"])


def _manifest() -> list[dict[str, Any]]:
    return json.loads((SAMPLES / "manifest.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture
def pipeline(settings, services):
    secret = secrets.token_hex(32)
    with (
        serving.running("ops.fakes.ledger", "ledger") as ledger_url,
        serving.running("ops.fakes.payables", "payables") as payables_url,
        model_running() as model,
    ):
        model.script(json.loads((SAMPLES / "model_script.json").read_text())["responses"])
        services.env.update(
            KEEL_LLM_BASE_URL=model.api_root,
            KEEL_LEDGER_URL=ledger_url,
            KEEL_PAYABLES_URL=payables_url,
            KEEL_TASK_TOKEN_SECRET=secret,
        )
        services.start("orchestrator", "--app", APP)
        services.start("worker", "--app", APP)
        client = KeelClient(settings, pipeline_app)
        tasks = TasksView(client.projection.r, settings.topic_prefix)
        signer = settings.model_copy(update={"task_token_secret": SecretStr(secret)})
        desk = TaskDesk(signer, tasks, client.send_as, wait_s=30)
        try:
            yield (
                client,
                desk,
                tasks,
                TaskTokens(secret.encode(), "tests"),
                (
                    LedgerClient(ledger_url),
                    PayablesClient(payables_url),
                ),
            )
        finally:
            client.close()


def test_every_branch_ends_as_its_sample_says_with_one_effect_per_posting(settings, pipeline):
    client, desk, tasks, tokens, (ledger, payables) = pipeline
    payables.set_faults(refuse_payments_to=["Fjord Legal Partners"], notify_500=2)
    ledger.set_faults(drop_after_commit=1)  # the first posting's answer is lost
    samples = {s["file"]: s for s in _manifest()}
    by_wf: dict[str, dict[str, Any]] = {}
    later = [f for f, s in samples.items() if s["scenario"] == "duplicate"]
    for file_name, sample in samples.items():
        if file_name in later:
            continue
        sla = SHORT_SLA if sample["scenario"] == "expire" else None
        wf, body = submission(file_name, (SAMPLES / file_name).read_text(), sla)
        copies = 3 if sample["invoice_number"] == "INV-2026-0001" else 1
        for _ in range(copies):  # a re-upload joins the run its first upload started
            client.start("invoice_pipeline", body, workflow_id=wf)
        by_wf[wf] = sample

    decided: set[str] = set()
    stale_refused: list[str] = []

    def decide(task: dict[str, Any], who: tuple[str, list[str]], decision: str, **kw: Any):
        token = tokens.issue(task["task_id"])
        digest = kw.pop("digest", task["operation_digest"])
        return desk.decide(token, who[0], who[1], decision, f"{decision} by {who[0]}", digest, **kw)

    def act() -> bool:
        for task in tasks.list():
            sample = by_wf.get(task["workflow_id"])
            if sample is None or task["task_id"] in decided:
                continue
            scenario = sample["scenario"]
            if scenario == "expire":
                continue
            if scenario == "stale":
                out = decide(task, APPROVER, "approve", digest="0" * 64)
                stale_refused.append(f"{out.status}: {out.reason}")
            if scenario in ("correct", "unsure", "bad_totals"):
                correction = {k: v for k, v in sample["correction"].items() if k != "confidence"}
                out = decide(task, CLERK, "approve", correction=correction)
            elif scenario == "unknown_supplier":
                out = decide(task, CLERK, "reject")
            else:
                verdict = "reject" if scenario == "reject" else "approve"
                out = decide(task, APPROVER, verdict)
            assert out.status == DecisionStatus.DECIDED, (scenario, out.reason)
            decided.add(task["task_id"])
        rows = [client.projection.get(wf) or {} for wf in by_wf]
        return all(r.get("status") in ("completed", "compensated", "failed") for r in rows)

    try:
        wait_until(act, 150, "every sample's run to end")
    except AssertionError:
        rows = {by_wf[wf]["file"]: client.projection.get(wf) or {} for wf in by_wf}
        going = {f: (r.get("status"), r.get("state")) for f, r in rows.items()}
        raise AssertionError(f"runs still going: {going}") from None
    original = next(wf for wf, s in by_wf.items() if s["invoice_number"] == "INV-2026-0002")
    for file_name in later:
        wf, body = submission(file_name, (SAMPLES / file_name).read_text())
        client.start("invoice_pipeline", body, workflow_id=wf)
        by_wf[wf] = samples[file_name]
        row = client.wait(wf, 60)
        assert row.output["reason"] == f"a duplicate of invoice run {original}"

    outcomes = {}
    for wf, sample in by_wf.items():
        row = client.projection.get(wf)
        assert row is not None
        outcome = "compensated" if row["status"] == "compensated" else row["output"]["outcome"]
        outcomes[sample["file"]] = outcome
    assert outcomes == {f: s["expected"] for f, s in samples.items()}
    assert stale_refused and stale_refused[0].startswith("refused: ")

    # The external systems' own books: one posting per invoice that posted or compensated,
    # the compensated one reversed, one payment and one notification per standing posting.
    books = ledger.ledger()
    posted = [s for s in samples.values() if s["expected"] in ("posted", "compensated")]
    assert sorted(p["extra"]["invoice_number"] for p in books["postings"]) == sorted(
        s["invoice_number"] for s in posted
    )
    assert set(books["effects"].values()) == {1}
    reversed_ = [p["extra"]["invoice_number"] for p in books["postings"] if p.get("reversed")]
    refused = [s["invoice_number"] for s in samples.values() if s["scenario"] == "payment_fails"]
    assert reversed_ == refused and sum(books["reversals"].values()) == 1
    standing = {p["posting_id"] for p in books["postings"] if not p.get("reversed")}
    paid = payables.books()
    assert {p["posting_id"] for p in paid["payments"].values()} == standing
    assert {n["posting_id"] for n in paid["notifications"].values()} >= standing
    assert set(paid["effects"].values()) == {1}

    # History: every run sound; the lost answer settled by one status query that found
    # the posting; the expired approval escalated first; the repaired extraction asked
    # the model twice.
    events = histories(settings)
    for wf in by_wf:
        assert_sound_history(wf, events[wf])
    queried = [
        e
        for wf in by_wf
        for e in events[wf]
        if e.type == "ActivityCompleted" and "/query/" in e.payload.activity_id
    ]
    assert len(queried) == 1 and json.loads(queried[0].payload.result_json)["found"] is True
    expired = next(wf for wf, s in by_wf.items() if s["scenario"] == "expire")
    kinds = [e.type for e in events[expired]]
    assert kinds.index("HumanTaskEscalated") < kinds.index("HumanTaskExpired")
    repaired = [wf for wf, s in by_wf.items() if s["scenario"] == "repair"]
    for wf in repaired:
        (done,) = [e for e in events[wf] if e.type == "ActivityCompleted"][:1]
        record = json.loads(done.payload.result_json)["llm"]
        assert len(record["calls"]) == 2, record["calls"]


def test_a_file_received_three_ways_is_one_run_and_one_posting(settings, services, pipeline):
    """Intake (docs/invoice-pipeline.md): the same file as two signed webhook deliveries
    (distinct event ids) and by ``keel invoices submit`` starts one run, posted once;
    a delivery sent again is deduplicated by the connector; an unsigned one is refused."""
    client, _, _, _, (ledger, _) = pipeline
    secret = secrets.token_hex(24)
    _, url = start_connector(services, "--app", APP, KEEL_WEBHOOK_INVOICES_SECRETS=secret)
    path = SAMPLES / "inv-2026-0003-auto.txt"
    upload = {"file_name": path.name, "document": path.read_text()}
    answers = []
    for event_id in ("upload-1", "upload-1", "upload-2"):
        body = json.dumps({"id": event_id, **upload}).encode()
        answers.append(request("POST", f"{url}/webhooks/invoices", body, signed(body, secret))[0])
    assert answers == [202, 200, 202]
    body = json.dumps({"id": "upload-3", **upload}).encode()
    unsigned = request(
        "POST", f"{url}/webhooks/invoices", body, {"Content-Type": "application/json"}
    )
    assert unsigned[0] == 401
    wf, _ = submission(path.name, path.read_text())
    assert client.wait(wf, 60).output["outcome"] == "posted"
    cli = subprocess.run(
        [sys.executable, "-m", "orchestrator", "invoices", "submit", str(path), "--json"],
        env=settings.child_environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == {"file": str(path), "workflow_id": wf, "status": "joined"}
    starts = [e for e in histories(settings)[wf] if e.type == "WorkflowStarted"]
    assert len(starts) == 1
    postings = [p for p in ledger.ledger()["postings"] if p["extra"]["invoice_id"] == wf]
    assert len(postings) == 1
