"""The bundled example application plus one webhook source, for ``keel connector`` demos.

``--app orchestrator.examples.webhook_app:app`` serves the same workflows and handlers as the
default ``orchestrator.examples:app`` and declares source ``documents`` (secrets in
``KEEL_WEBHOOK_DOCUMENTS_SECRETS``), whose deliveries look like::

    {"id": "evt-1", "type": "document.added",   "workflow_id": "review-1", "document": "receipt"}
    {"id": "evt-2", "type": "review.requested", "workflow_id": "review-2", "document": "invoice"}

``document.added`` signals ``documents_added`` to a ``document_review`` run waiting for
more documents; ``review.requested`` starts one. The orchestrator and worker may keep the
default app: the definitions are the same objects.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from orchestrator import KeelApp, WebhookSignal, WebhookStart
from orchestrator.examples import app as examples

__all__ = ["DOCUMENTS_SECRETS_ENV", "DocumentEvent", "app"]

DOCUMENTS_SECRETS_ENV = "KEEL_WEBHOOK_DOCUMENTS_SECRETS"


class DocumentEvent(StrEnum):
    """The ``type`` of a ``documents`` delivery."""

    ADDED = "document.added"
    REVIEW_REQUESTED = "review.requested"


app = KeelApp("keel-examples-webhooks")
for _definition in examples.definitions.values():
    app.workflow(_definition)
app.handlers.update(examples.handlers)
app.external_activities |= examples.external_activities


def _route(body: dict[str, Any]) -> WebhookSignal | WebhookStart:
    kind = body["type"]
    if kind == DocumentEvent.ADDED:
        return WebhookSignal(body["workflow_id"], "documents_added", {"document": body["document"]})
    if kind == DocumentEvent.REVIEW_REQUESTED:
        return WebhookStart("document_review", body["workflow_id"], {"document": body["document"]})
    known = ", ".join(DocumentEvent)
    raise ValueError(f"unknown event type {str(kind)[:60]!r}; known: {known}")


app.webhook(
    "documents",
    secret_env=DOCUMENTS_SECRETS_ENV,
    event_id=lambda body: body["id"],
    route=_route,
)
