"""A fan-out of 200 items, 5 at a time, through a SIGKILL of the orchestrator and one of
the worker (docs/fan-out.md): the ledger's own books show every item posted exactly
once and never more than 5 postings at once, and the results keep input order."""

from __future__ import annotations

from orchestrator.examples.batches import BATCH_CONCURRENCY
from tests.support import assert_sound_history, histories, wait_until

ITEMS = 200


def _effects(ledger) -> int:
    return int(ledger.ledger()["total_effects"])


def test_fan_out_posts_each_item_once_within_its_concurrency_through_sigkills(
    settings, services, client, ledger_url, ledger
):
    # Dedupe off: a second POST of one key would be a second effect in the books. Every
    # answer is 0.2 s late (after the commit), so postings overlap and kills land mid-call.
    ledger.set_faults(dedupe=False, delay_s=0.2, delay_count=1_000_000)
    services.env["KEEL_LEDGER_URL"] = ledger_url
    orchestrator = services.start("orchestrator")
    worker = services.start("worker")
    invoices = [
        {"invoice_id": f"I{i:03d}", "account": f"A{i % 7}", "amount": i + 1} for i in range(ITEMS)
    ]
    client.start("invoice_batch", {"batch_id": "b-1", "invoices": invoices}, workflow_id="batch-1")

    wait_until(lambda: _effects(ledger) >= 40, 120, "40 postings before the orchestrator's kill")
    services.kill(orchestrator)
    assert _effects(ledger) < ITEMS, "the orchestrator was killed mid-way"
    services.start("orchestrator")
    wait_until(lambda: _effects(ledger) >= 110, 180, "110 postings before the worker's kill")
    services.kill(worker)
    assert _effects(ledger) < ITEMS, "the worker was killed mid-way"
    services.start("worker")

    row = client.wait("batch-1", timeout_s=300)
    assert row.status == "completed", row
    book = ledger.ledger()
    by_invoice = {p["extra"]["invoice_id"]: p for p in book["postings"]}
    assert sorted(by_invoice) == [inv["invoice_id"] for inv in invoices]
    assert set(book["effects"].values()) == {1}, "exactly one posting per item"
    assert book["total_effects"] == ITEMS
    assert 1 < book["peak_in_flight"] <= BATCH_CONCURRENCY
    output = row.output
    assert output["failed"] == []
    assert output["postings"] == [by_invoice[inv["invoice_id"]]["posting_id"] for inv in invoices]

    (events,) = [e for wf, e in histories(settings).items() if wf == "batch-1"]
    assert_sound_history("batch-1", events)
    assert [e.payload.items for e in events if e.type == "FanOutStarted"] == [ITEMS]
    first = {
        e.payload.activity_id
        for e in events
        if e.type == "ActivityScheduled"
        and e.payload.attempt == 1
        and "/query/" not in e.payload.activity_id
    }
    assert first == {f"post#1/post[{i}]" for i in range(ITEMS)}
    keys = {
        e.payload.activity_id: e.payload.idempotency_key
        for e in events
        if e.type == "ActivityScheduled"
    }
    assert set(book["effects"]) == {keys[f"post#1/post[{i}]"] for i in range(ITEMS)}
