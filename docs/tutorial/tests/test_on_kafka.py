"""The shop on a real Kafka and Redis (the keel_stack fixture: docs/testing.md): the same
order through the real orchestrator and worker, and the nightly schedule."""

from pathlib import Path
from typing import Any

from shop import services

from orchestrator import KeelApp


def test_an_order_and_its_schedule_on_the_real_stack(
    keel_stack: Any, keel_app: KeelApp, tmp_path: Path
) -> None:
    settings = keel_stack.settings(tmp_path, task_token_secret="t" * 32)
    order = {
        "order_id": "K1",
        "customer": "kay",
        "card": "4242",
        "lines": [{"sku": "cup", "quantity": 2, "unit_cents": 1200}],
    }
    with keel_stack.serve(keel_app, settings) as client:
        client.start("order_fulfilment", order, workflow_id="order-K1")
        # what Stripe's webhook does through `keel connector`, sent directly here
        client.signal("order-K1", "payment_succeeded", {"payment_intent": "pi_K1"})
        done = client.wait("order-K1", timeout_s=60)
        assert (done.status, done.output["total_cents"]) == ("completed", 2400)
        assert services.count("charge") == 1

        nightly = client.schedules.create(
            "nightly-digest",
            "nightly_digest",
            {"shop": "tea-house"},
            cron="0 2 * * *",
            timezone="UTC",
        )
        assert nightly.state == "active" and nightly.next_fires[0].endswith("T02:00:00Z")
