"""A long-lived inbox fed by a signed webhook source, for the lifetime-dedupe test.

``inbox`` waits for ``doc`` signals forever, continuing as new after every
:data:`EVERY` of them (so one workflow id lives through many runs); source ``inbox``
(secrets in ``KEEL_WEBHOOK_INBOX_SECRETS``) turns ``{"id", "workflow_id", "doc"}`` into
that signal.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator import KeelApp, SignalWait, State, Transition, WebhookSignal, WorkflowDefinition

__all__ = ["EVERY", "SECRETS_ENV", "SOURCE", "app"]

#: Signals a run takes before it continues as new.
EVERY = 250
SOURCE = "inbox"
SECRETS_ENV = "KEEL_WEBHOOK_INBOX_SECRETS"


class Empty(BaseModel):
    pass


def _taken(ctx: Any) -> int:
    return len(ctx.signals.get("doc", []))


app = KeelApp("webhook-loop")
app.workflow(
    WorkflowDefinition(
        "inbox",
        1,
        Empty,
        [
            State(
                "hold",
                wait=SignalWait("doc"),
                transitions=[Transition("hold", when=lambda ctx: _taken(ctx) < EVERY)],
                continue_as_new=lambda ctx: {},
            )
        ],
    )
)
app.webhook(
    SOURCE,
    secret_env=SECRETS_ENV,
    event_id=lambda body: body["id"],
    route=lambda body: WebhookSignal(body["workflow_id"], "doc", {"doc": body["doc"]}),
)
