"""The invoice pipeline (docs/invoice-pipeline.md), on its own application:
``--app orchestrator.examples.invoice_pipeline:app``.

One invoice file per run, its SHA-256 the workflow id: an LLM extraction to a versioned
schema (bounded repairs, then a clerk), deterministic checks and a recorded duplicate
lookup, a human approval above a threshold bound to the exact posting, the ledger
posting (idempotent, a status query on an unknown outcome) followed by a notification
and a payment whose permanent failure reverses the posting, and a reconciliation of the
ledger's own record. Files arrive through the connector's webhook source ``invoices`` or
``keel invoices submit FILE...``. The model answers come from ``KEEL_LLM_BASE_URL``
(tests and the demo use ``ops/fakes/openai_server.py``); the ledger from
``KEEL_LEDGER_URL``, accounts payable from ``KEEL_PAYABLES_URL``.

An application like any user's: imports only the public face (``orchestrator``) and its
own modules; nothing in the product imports it.
"""

from __future__ import annotations

from orchestrator.examples.invoice_pipeline import (
    pipeline_intake,
    pipeline_services,
    pipeline_workflow,
)
from orchestrator.examples.invoice_pipeline.pipeline_app import app

__all__ = ["app", "pipeline_intake", "pipeline_services", "pipeline_workflow"]
