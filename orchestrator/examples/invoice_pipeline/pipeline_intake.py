"""How invoices reach the pipeline: webhook source ``invoices`` on the connector.

A sender (a mail gateway, a scanner, an upload form) POSTs each received file, signed
with a secret in ``KEEL_WEBHOOK_INVOICES_SECRETS`` (docs/connector.md)::

    {"id": "upload-17", "file_name": "inv-0042.txt", "document": "INVOICE\\n..."}

and may name the approval's SLA (``"sla": {"due_s", "escalate_after_s",
"expires_after_s"}``, default a day, a day and three days).

The connector answers 202 once Kafka has the start. A delivery sent again (same ``id``)
is deduplicated by the connector; the same file sent under another ``id`` starts a run
with the same workflow id (the file's SHA-256), which joins the first: one run, one
posting. ``keel invoices submit FILE...`` does the same for files on disk, without
the connector.
"""

from __future__ import annotations

from typing import Any

from orchestrator import WebhookStart
from orchestrator.examples.invoice_pipeline.pipeline_app import app
from orchestrator.examples.invoice_pipeline.pipeline_models import ApprovalSla, submission

__all__ = ["INVOICES_SECRETS_ENV", "route_upload"]

INVOICES_SECRETS_ENV = "KEEL_WEBHOOK_INVOICES_SECRETS"


def route_upload(body: dict[str, Any]) -> WebhookStart:
    """The start one uploaded file asks for (its SHA-256 is the workflow id)."""
    sla = ApprovalSla.model_validate(body["sla"]) if body.get("sla") is not None else None
    workflow_id, input_obj = submission(str(body["file_name"]), str(body["document"]), sla)
    return WebhookStart("invoice_pipeline", workflow_id, input_obj)


app.webhook(
    "invoices",
    secret_env=INVOICES_SECRETS_ENV,
    event_id=lambda body: body["id"],
    route=route_upload,
)
