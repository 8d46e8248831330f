"""The shop's workflows, in process and with time skipped (docs/testing.md): the keel_env
fixture runs the real engine and worker over ``[tool.keel] app`` (``shop:app``)."""

import hashlib
import hmac
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from shop import services
from shop.activities import book_courier, call_status, charge_card, release_item

from orchestrator.activity import OutcomeUnknownError, PermanentError
from orchestrator.testing import RunHandle, WorkflowEnvironment, WorkflowFailedError

STRIPE_SECRET = "whsec_tutorial"
SMALL: dict[str, Any] = {
    "order_id": "A1",
    "customer": "ada",
    "card": "4242",
    "lines": [{"sku": "tea", "quantity": 2, "unit_cents": 450}],
}
BIG: dict[str, Any] = {
    "order_id": "B7",
    "customer": "bob",
    "card": "4242",
    "lines": [
        {"sku": "samovar", "quantity": 1, "unit_cents": 95000},
        {"sku": "kettle", "quantity": 1, "unit_cents": 8900},
        {"sku": "cup", "quantity": 6, "unit_cents": 1200},
    ],
}


def stripe_paid(env: WorkflowEnvironment, order_id: str, event_id: str) -> int:
    """Stripe's ``payment_intent.succeeded`` for the order, signed as Stripe signs it."""
    body = json.dumps(
        {
            "id": event_id,
            "type": "payment_intent.succeeded",
            "data": {
                "object": {"id": f"pi_{order_id}", "metadata": {"workflow_id": f"order-{order_id}"}}
            },
        }
    ).encode()
    at = int(env.now().timestamp())
    signed = hmac.new(STRIPE_SECRET.encode(), f"{at}.".encode() + body, hashlib.sha256)
    headers = {"Stripe-Signature": f"t={at},v1={signed.hexdigest()}"}
    return env.deliver_webhook("stripe", body, headers).status


def start(env: WorkflowEnvironment, order: dict[str, Any]) -> RunHandle:
    return env.start("order_fulfilment", order, workflow_id=f"order-{order['order_id']}")


pytestmark = pytest.mark.keel_env(webhook_secrets={"stripe": STRIPE_SECRET})


def test_a_small_order_is_charged_once_and_shipped(keel_env: WorkflowEnvironment) -> None:
    run = start(keel_env, SMALL)
    assert run.status == "waiting"  # for Stripe
    assert stripe_paid(keel_env, "A1", "evt_1") == 202
    assert stripe_paid(keel_env, "A1", "evt_1") == 200  # Stripe retried: a duplicate

    done = run.result()
    assert done["total_cents"] == 900 and done["tracking"].startswith("trk_")
    assert (services.count("reserve"), services.count("charge")) == (1, 1)


def test_a_big_order_waits_for_a_manager(keel_env: WorkflowEnvironment) -> None:
    run = start(keel_env, BIG)
    task = run.human_task("approve_order")
    assert task.role == "sales-manager"

    refused = run.approve(task, actor="ivan", roles=["intern"])
    assert not refused.decided and "holds none of the roles" in refused.reason
    assert run.approve(task, actor="maria").decided

    assert stripe_paid(keel_env, "B7", "evt_2") == 202
    assert run.result()["total_cents"] == 95000 + 8900 + 6 * 1200
    assert services.count("reserve") == 3  # one per line


def test_an_approval_nobody_gives_expires_after_30_days_in_no_time(
    keel_env: WorkflowEnvironment,
) -> None:
    began_wall = time.monotonic()
    began = keel_env.now()
    run = start(keel_env, BIG)

    with pytest.raises(WorkflowFailedError, match="the order was not approved"):
        run.result()
    (expired,) = run.recorded_at("HumanTaskExpired")
    assert expired - began == timedelta(days=30)
    assert services.count("charge") == 0
    assert time.monotonic() - began_wall < 2


def test_a_charge_whose_answer_was_lost_is_looked_up_not_repeated(
    keel_env: WorkflowEnvironment,
) -> None:
    # the charge happens, then the connection drops: the outcome is unknown
    keel_env.fail(charge_card, OutcomeUnknownError("connection reset"), after_call=True)
    run = start(keel_env, SMALL)
    assert stripe_paid(keel_env, "A1", "evt_3") == 202

    run.result()
    assert keel_env.calls(charge_card) == 1  # never sent again
    assert keel_env.calls(call_status) == 1  # asked instead
    assert services.count("charge") == 1


def test_no_courier_refunds_the_payment_and_releases_every_line(
    keel_env: WorkflowEnvironment,
) -> None:
    keel_env.fail(book_courier, PermanentError("no courier serves this address"))
    run = start(keel_env, BIG)
    run.approve(run.human_task("approve_order"), actor="maria")
    stripe_paid(keel_env, "B7", "evt_4")

    with pytest.raises(WorkflowFailedError) as failed:
        run.result()
    assert failed.value.status == "compensated"
    assert (services.count("refund"), services.count("release")) == (1, 3)
    assert keel_env.calls(release_item) == 3


def test_an_order_stripe_never_confirms_is_undone_after_a_day(
    keel_env: WorkflowEnvironment,
) -> None:
    run = start(keel_env, SMALL)
    with pytest.raises(WorkflowFailedError, match="did not confirm the payment within a day"):
        run.result()
    assert (services.count("charge"), services.count("refund")) == (1, 1)


def test_the_nightly_digest_counts_the_charges(keel_env: WorkflowEnvironment) -> None:
    start(keel_env, SMALL)
    stripe_paid(keel_env, "A1", "evt_5")
    digest = keel_env.start("nightly_digest", {"shop": "tea-house"}).result()
    assert digest == {"shop": "tea-house", "charges": 1}
