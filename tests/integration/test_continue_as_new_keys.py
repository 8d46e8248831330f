"""Issue 29 item 1 on a real broker: continue-as-new never reuses an idempotency key.

``monthly_billing`` (tests/integration/continue_app.py) started at month 1 continues as
new exactly 3 times (``CONTINUES``): 4 runs, months 1 to 4. Each run asks its LLM node
for the month's bill and posts it to the fake ledger. Real orchestrator and worker
processes, real Kafka and Redis, the fake ledger and the fake OpenAI-compatible model
server; the assertions read the external systems' own books (the ledger's effects per
key, the model server's request log) and the recorded history. If a continued run
counted its logical attempts from 1 again (key ``<wf>/<type>/1`` in every run), the worker
would answer month 2 from month 1's stored model response and effect record: the model
would be asked once and the ledger would hold one posting.

Then ``keel replay-check --from-topic`` re-decides every command of the 4 runs from the
recorded history (a workflow's runs replay as one sequence: the command that ends a run
also begins the next): all of them identically, without asking the model anything (the
server's request count is unchanged) or touching the ledger.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ops.fakes.openai_server import running
from orchestrator.client.client import KeelClient
from tests.integration import continue_app
from tests.integration.continue_app import APP, CONTINUES, LAST_MONTH, statement
from tests.integration.test_durable_core import keel
from tests.support import assert_sound_history, histories

WF = "billing-acme"
ACCOUNT = "acme"
MONTHS = list(range(1, LAST_MONTH + 1))
RUNS = CONTINUES + 1
LLM_TYPE = "llm.monthly_bill"
POST_TYPE = "post_to_ledger"


def amount(month: int) -> float:
    """The bill the fake model answers for ``month`` (distinct per month)."""
    return 100.0 * month


def key(activity_type: str, run: int) -> str:
    return f"{WF}/{activity_type}/{run}"


@pytest.fixture(scope="module")
def model_server():
    with running() as fake:
        yield fake


@pytest.fixture
def model(model_server):
    model_server.reset()
    return model_server


@pytest.fixture
def billing(settings, services, ledger, ledger_url, model):
    """Orchestrator and worker of the continue-as-new app, on the fake ledger and model."""
    services.env.update(KEEL_LLM_BASE_URL=model.api_root, KEEL_LEDGER_URL=ledger_url)
    services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    client = KeelClient(settings, continue_app.app)
    yield client
    client.close()


def by_type(events: list, event_type: str) -> list[Any]:
    return [e for e in events if e.type == event_type]


def test_each_continued_run_posts_once_and_asks_the_model_once_under_keys_of_its_own(
    settings, billing, ledger, model
) -> None:
    assert RUNS == 4, "the workflow continues as new exactly 3 times: 4 runs"
    model.script(
        [
            {"match": statement(ACCOUNT, m), "json": {"amount": amount(m), "currency": "EUR"}}
            for m in MONTHS
        ]
    )
    billing.start("monthly_billing", {"account": ACCOUNT, "month": 1}, WF)
    done = billing.wait(WF, 60)

    # The ledger's own book: one posting per run, each under a key of its own, each
    # carrying that month's bill.
    book = ledger.ledger()
    post_keys = [key(POST_TYPE, n) for n in range(1, RUNS + 1)]
    assert book["effects"] == dict.fromkeys(post_keys, 1), book["effects"]
    assert book["total_effects"] == RUNS
    assert book["calls"] == dict.fromkeys(post_keys, 1), "one request per posting, no retry"
    assert [(p["key"], p["extra"]["invoice_id"], p["amount"]) for p in book["postings"]] == [
        (key(POST_TYPE, m), f"{ACCOUNT}-m{m}", amount(m)) for m in MONTHS
    ]

    # The model server's own log: exactly one request per run, each under its run's key.
    requests = model.requests()
    assert [(r["call"], r["outcome"]) for r in requests] == [
        (f"{key(LLM_TYPE, n)}#0", "scripted") for n in range(1, RUNS + 1)
    ]
    for request, month in zip(requests, MONTHS, strict=True):
        assert statement(ACCOUNT, month) in json.dumps(request["messages"])

    assert done.status == "completed", done
    assert done.output == {"month": LAST_MONTH, "posting_id": book["postings"][-1]["posting_id"]}

    # The history: 3 continue-as-new events, 4 runs, one logical attempt and one key per
    # run for the node and for the posting.
    events = histories(settings).get(WF, [])
    assert_sound_history(WF, events)
    continued = by_type(events, "WorkflowContinuedAsNew")
    assert len(continued) == CONTINUES
    assert [json.loads(e.payload.input_json)["month"] for e in continued] == MONTHS[1:]
    runs = list(dict.fromkeys(e.run_id for e in events))
    assert len(runs) == RUNS
    assert [e.payload.new_run_id for e in continued] == runs[1:]
    scheduled = by_type(events, "ActivityScheduled")
    for activity_type in (LLM_TYPE, POST_TYPE):
        mine = [e for e in scheduled if e.payload.activity_type == activity_type]
        assert [
            (e.run_id, e.payload.logical_attempt, e.payload.attempt, e.payload.idempotency_key)
            for e in mine
        ] == [(runs[n - 1], n, 1, key(activity_type, n)) for n in range(1, RUNS + 1)]
    completed = [json.loads(e.payload.result_json) for e in by_type(events, "ActivityCompleted")]
    nodes = [r for r in completed if "llm" in r]
    assert [r["output"]["amount"] for r in nodes] == [amount(m) for m in MONTHS]
    assert [[c["reused"] for c in r["llm"]["calls"]] for r in nodes] == [[False]] * RUNS
    assert [r["key"] for r in completed if "posting_id" in r] == post_keys

    # A replay of the runs re-decides each of their commands from the history alone:
    # identically, and neither the model nor the ledger hears of it.
    asked_before, book_before = len(requests), ledger.ledger()
    check = keel(settings, "replay-check", "--from-topic", "--json", "--app", APP)
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert (report["runs"], report["diverged"]) == (1, 0), report
    [run] = report["reports"]
    assert (run["workflow_id"], run["ok"], run["folded_only"]) == (WF, True, 0), run
    assert len(model.requests()) == asked_before, "the replay asked the model"
    assert ledger.ledger() == book_before, "the replay reached the ledger"
