"""Four webhook sources, one per provider scheme, each feeding the same ``tally`` workflow.

Each source's ``route`` is a pure mapping of the provider's own event shape: the first
event of a thing starts ``tally`` for it; a follow-up signals ``hook`` to it. ``tally``
completes after two ``hook`` signals with the signals it received (so a signal applied
twice shows). Used by tests/integration/test_webhook_schemes.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator import (
    KeelApp,
    SignalWait,
    SignatureScheme,
    State,
    Transition,
    WebhookEvent,
    WebhookSignal,
    WebhookStart,
    WorkflowDefinition,
)

__all__ = ["SECRETS_ENV", "app"]

#: The variable holding each source's secrets.
SECRETS_ENV = {
    SignatureScheme.STANDARD_WEBHOOKS: "KEEL_WEBHOOK_BILLING_SECRETS",
    SignatureScheme.GITHUB: "KEEL_WEBHOOK_GITHUB_SECRETS",
    SignatureScheme.STRIPE: "KEEL_WEBHOOK_STRIPE_SECRETS",
    SignatureScheme.SLACK: "KEEL_WEBHOOK_SLACK_SECRETS",
}


class Opened(BaseModel):
    opened_by: str


app = KeelApp("webhook-schemes")
app.workflow(
    WorkflowDefinition(
        "tally",
        1,
        Opened,
        [
            State(
                "listen",
                wait=SignalWait("hook"),
                transitions=[Transition("listen", when=lambda ctx: len(ctx.signals["hook"]) < 2)],
                complete=lambda ctx: {
                    "opened_by": ctx.input.opened_by,
                    "hooks": ctx.signals["hook"],
                },
            )
        ],
    )
)


def unknown(event: WebhookEvent) -> ValueError:
    return ValueError(f"unhandled event type {event.type[:60]!r}")


def billing(event: WebhookEvent) -> WebhookSignal | WebhookStart:
    """Standard Webhooks: ``{"type": "invoice.created"|"invoice.paid", "data": {...}}``."""
    data = event.body["data"]
    if event.type == "invoice.created":
        return WebhookStart(
            "tally", f"invoice-{data['invoice_id']}", {"opened_by": data["customer"]}
        )
    if event.type == "invoice.paid":
        return WebhookSignal(f"invoice-{data['invoice_id']}", "hook", {"paid": data["amount"]})
    raise unknown(event)


def github(event: WebhookEvent) -> WebhookSignal | WebhookStart:
    """GitHub: ``issues`` (opened) starts, ``issue_comment`` (created) signals."""
    body = event.body
    wf = f"issue-{body['repository']['full_name'].replace('/', '-')}-{body['issue']['number']}"
    if event.type == "issues" and body["action"] == "opened":
        return WebhookStart("tally", wf, {"opened_by": body["sender"]["login"]})
    if event.type == "issue_comment" and body["action"] == "created":
        return WebhookSignal(wf, "hook", {"comment": body["comment"]["body"]})
    raise unknown(event)


def stripe(event: WebhookEvent) -> WebhookSignal | WebhookStart:
    """Stripe: ``payment_intent.created`` starts; ``charge.succeeded`` signals."""
    obj = event.body["data"]["object"]
    if event.type == "payment_intent.created":
        return WebhookStart("tally", f"payment-{obj['id']}", {"opened_by": obj["customer"]})
    if event.type == "charge.succeeded":
        return WebhookSignal(f"payment-{obj['payment_intent']}", "hook", {"charged": obj["amount"]})
    raise unknown(event)


def slack(event: WebhookEvent) -> WebhookSignal | WebhookStart:
    """Slack Events API: ``app_mention`` starts; ``reaction_added`` to it signals."""
    inner: dict[str, Any] = event.body["event"]
    if event.type == "app_mention":
        return WebhookStart(
            "tally", f"thread-{inner['channel']}-{inner['ts']}", {"opened_by": inner["user"]}
        )
    if event.type == "reaction_added":
        item = inner["item"]
        return WebhookSignal(
            f"thread-{item['channel']}-{item['ts']}", "hook", {"reaction": inner["reaction"]}
        )
    raise unknown(event)


for _name, _scheme, _route in [
    ("billing", SignatureScheme.STANDARD_WEBHOOKS, billing),
    ("github", SignatureScheme.GITHUB, github),
    ("stripe", SignatureScheme.STRIPE, stripe),
    ("slack", SignatureScheme.SLACK, slack),
]:
    app.webhook(_name, secret_env=SECRETS_ENV[_scheme], route=_route, scheme=_scheme)
