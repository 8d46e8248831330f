"""SIGKILL the worker mid-call, many times: every workflow completes, one ledger effect each."""

from __future__ import annotations

import random
import time

from tests.support import assert_sound_history, histories, wait_until


def test_worker_sigkilled_mid_call_never_duplicates_a_posting(
    settings, services, client, ledger_url, ledger
):
    rng = random.Random(11)
    # Dedupe off: a second POST of one key would show up as a second effect. Every
    # response is late (after the commit), so kills land between effect and report.
    ledger.set_faults(dedupe=False, delay_s=0.3, delay_count=1_000_000)
    services.env["KEEL_LEDGER_URL"] = ledger_url
    services.start("orchestrator")
    worker = services.start("worker")
    n, waves = 300, 6
    per_wave = n // waves
    for w in range(waves):  # a wave of postings, then a kill while they are in flight
        client.start_many(
            "invoice_posting",
            [
                (f"post-{i}", {"invoice_id": f"I{i}", "account": "A", "amount": i})
                for i in range(w * per_wave, (w + 1) * per_wave)
            ],
        )
        calls_before = sum(ledger.ledger()["calls"].values())
        # Once postings reach the ledger the worker is mid-call (answers are 0.3 s late).
        wait_until(
            lambda b=calls_before: sum(ledger.ledger()["calls"].values()) > b,
            60,
            "postings to reach the ledger",
            interval_s=0.02,
        )
        time.sleep(rng.uniform(0.0, 0.2))
        services.kill(worker)
        worker = services.start("worker")
    wait_until(
        lambda: client.projection.counts()["completed"] == n, 300, f"{n} completed workflows"
    )
    book = ledger.ledger()
    keys = {f"post-{i}/post_to_ledger/1" for i in range(n)}
    assert set(book["effects"]) == keys
    assert set(book["effects"].values()) == {1}, "exactly one effect per workflow"
    assert book["total_effects"] == n
    queried = 0
    for wf, events in histories(settings).items():
        assert_sound_history(wf, events)
        # in doubt (the redelivered task found its attempt pending, or start-to-close
        # fired first: either way the orchestrator asked the ledger before anything else)
        queried += sum(e.type == "ActivityScheduled" and "/query/" in e.payload.activity_id
                       for e in events)  # fmt: skip
    assert queried > 0, "some kills landed mid-call and went through the status query"
