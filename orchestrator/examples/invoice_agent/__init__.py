"""The all-agent variant of the invoice pipeline (docs/invoice-pipeline.md, "The all-agent
variant"), on its own application: ``--app orchestrator.examples.invoice_agent:app``.

One invoice file per run, its SHA-256 the workflow id (the pipeline's input,
``InvoiceFile``): ONE bounded agent reads the document and drives the whole process with
tools (``check_supplier``, ``find_duplicate``, ``request_approval``, ``post_invoice``,
``schedule_payment``, ``reverse_posting``) against the same ledger (``KEEL_LEDGER_URL``)
and accounts payable (``KEEL_PAYABLES_URL``) the pipeline's activities call. It is the
counterpart the evaluation compares with the pipeline's deterministic backbone: no
status query, no approval bound to a digest, no reconciliation.

An application like any user's: imports only the public face (``orchestrator``), its
own modules and the pipeline's models and rules; nothing in the product imports it.
"""

from __future__ import annotations

from orchestrator.examples.invoice_agent import agent_tools, agent_workflow
from orchestrator.examples.invoice_agent.agent_app import app

__all__ = ["agent_tools", "agent_workflow", "app"]
