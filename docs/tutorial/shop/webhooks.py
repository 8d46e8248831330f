"""Stripe tells the shop a payment succeeded: a signed webhook, checked by the connector
(docs/connector.md), routed to the order's run as the signal it waits for. The charge put
the run's id in the payment's metadata, which Stripe sends back with every event."""

from orchestrator.webhooks import SignatureScheme, WebhookEvent, WebhookSignal
from shop.app import app


def stripe(event: WebhookEvent) -> WebhookSignal:
    intent = event.body["data"]["object"]
    if event.type == "payment_intent.succeeded":
        workflow_id = intent["metadata"]["workflow_id"]
        return WebhookSignal(workflow_id, "payment_succeeded", {"payment_intent": intent["id"]})
    raise ValueError(f"unhandled Stripe event {event.type}")


app.webhook("stripe", scheme=SignatureScheme.STRIPE, secret_env="SHOP_STRIPE_SECRETS", route=stripe)
