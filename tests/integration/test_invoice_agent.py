"""The invoice pipeline's all-agent variant on the real stack (docs/invoice-pipeline.md,
"The all-agent variant"): sample invoices through ``invoice_agent`` with a real
orchestrator and worker, the OpenAI fake playing the scripted agent
(``ops/invoices/agent_script.py``), and the fake ledger and accounts payable.

Each sample ends in the outcome the pipeline's sample names, the ledger's own books hold
exactly one posting per invoice that posted (a lost answer included: the agent posts
again under the same key), the refused payment's posting is reversed, and every history
keeps the invariants.
"""

from __future__ import annotations

import json

import pytest

from ops.fakes import serving
from ops.fakes.ledger import LedgerClient
from ops.fakes.openai_server import running as model_running
from ops.fakes.payables import PayablesClient
from ops.invoices.agent_script import agent_input, agent_model_script
from ops.invoices.invoice_samples import Sample, Scenario, samples
from orchestrator.client.client import KeelClient
from orchestrator.examples.invoice_agent import app as agent_app
from orchestrator.examples.invoice_pipeline.pipeline_models import file_digest
from tests.support import assert_sound_history, histories

APP = "orchestrator.examples.invoice_agent:app"
SCENARIOS = (
    Scenario.AUTO,
    Scenario.APPROVE,
    Scenario.REJECT,
    Scenario.PAYMENT_FAILS,
    Scenario.UNKNOWN_SUPPLIER,
)


def _items() -> list[Sample]:
    pool = samples()
    return [next(s for s in pool if s.scenario is scenario) for scenario in SCENARIOS]


@pytest.fixture
def agent(settings, services):
    with (
        serving.running("ops.fakes.ledger", "ledger") as ledger_url,
        serving.running("ops.fakes.payables", "payables") as payables_url,
        model_running() as model,
    ):
        services.env.update(
            KEEL_LLM_BASE_URL=model.api_root,
            KEEL_LEDGER_URL=ledger_url,
            KEEL_PAYABLES_URL=payables_url,
        )
        services.start("orchestrator", "--app", APP)
        services.start("worker", "--app", APP)
        client = KeelClient(settings, agent_app)
        try:
            yield client, model, LedgerClient(ledger_url), PayablesClient(payables_url)
        finally:
            client.close()


def test_each_sample_ends_as_the_pipelines_does_with_one_posting_per_invoice(settings, agent):
    client, model, ledger, payables = agent
    items = _items()
    model.script(agent_model_script(items))
    payables.set_faults(refuse_payments_to=["Fjord Legal Partners"])
    ledger.set_faults(drop_after_commit=1)  # the first posting's answer is lost
    by_wf = {file_digest(s.document()): s for s in items}
    for wf, s in by_wf.items():
        client.start("invoice_agent", agent_input(s), workflow_id=wf)

    rows = {wf: client.wait(wf, 90) for wf in by_wf}
    outcomes = {s.scenario: rows[wf].output["outcome"] for wf, s in by_wf.items()}
    assert outcomes == {s.scenario: s.expected for s in items}
    assert all(r.status == "completed" for r in rows.values())

    # The ledger's own books: one posting per invoice that posted or was compensated, the
    # output's posting id the ledger's, the refused payment's posting reversed.
    books = ledger.ledger()
    posted = {s.number: wf for wf, s in by_wf.items() if s.expected in ("posted", "compensated")}
    assert sorted(p["extra"]["invoice_number"] for p in books["postings"]) == sorted(posted)
    assert set(books["effects"].values()) == {1}
    assert max(books["calls"].values()) == 2, "the lost answer was posted again, deduplicated"
    for p in books["postings"]:
        number = p["extra"]["invoice_number"]
        assert p["extra"]["invoice_id"] == posted[number]
        assert rows[posted[number]].output["posting_id"] == p["posting_id"]
    reversed_ = [p["extra"]["invoice_number"] for p in books["postings"] if p.get("reversed")]
    assert reversed_ == [s.number for s in items if s.scenario is Scenario.PAYMENT_FAILS]
    standing = {p["posting_id"] for p in books["postings"] if not p.get("reversed")}
    paid = payables.books()
    assert {p["posting_id"] for p in paid["payments"].values()} == standing
    assert set(paid["effects"].values()) == {1}

    approve = next(wf for wf, s in by_wf.items() if s.scenario is Scenario.APPROVE)
    assert rows[approve].output["approved_by"] == "approvals-desk"

    # History: one agent node per run, its steps recorded; no model request left over.
    events = histories(settings)
    for wf in by_wf:
        assert_sound_history(wf, events[wf])
        (done,) = [e for e in events[wf] if e.type == "ActivityCompleted"]
        record = json.loads(done.payload.result_json)["llm"]
        assert record["stop_reason"] == "answered" and record["refused_tools"] == []
    requests = model.requests()
    assert all(r["outcome"] == "scripted" for r in requests)
    assert len(requests) == sum(r.output["steps"] for r in rows.values())


def test_an_agent_that_keeps_calling_tools_fails_the_run_at_its_bound(settings, agent):
    """Exhaustion: a model that never answers stops at ``max_steps``; the run fails with
    the reason, and nothing was posted."""
    client, model, ledger, _ = agent
    (s,) = [x for x in _items() if x.scenario is Scenario.AUTO]
    check = {
        "name": "check_supplier",
        "arguments": {"supplier": s.supplier, "invoice_number": s.number},
    }
    model.script([], default={"tool_calls": [check]})
    wf = file_digest(s.document())
    client.start("invoice_agent", agent_input(s), workflow_id=wf)
    row = client.wait(wf, 90)
    assert row.status == "failed"
    assert row.failure_reason.startswith(
        "the invoice agent gave up: agent 'invoice_agent' stopped: max_steps after 8 step(s)"
    )
    assert ledger.ledger()["postings"] == []
    assert len(model.requests()) == 8
