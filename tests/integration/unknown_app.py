"""A test application whose ledger postings have no status query (issue 29, item 2).

Run by real orchestrator and worker processes with ``--app tests.integration.unknown_app:app``
(see ``APP``). Besides the bundled examples it registers:

* ``posting_without_query`` v1: ``post_to_ledger`` (a ``@side_effect``) with no
  ``status_query``: an unknown outcome needs an operator (``keel workflow resolve``),
  never a blind second attempt of the write;
* ``posting_retry_unknown`` v1: the same step declaring ``on_unknown="retry"`` (the
  ledger deduplicates by the idempotency key), so an unknown outcome dispatches the
  same key again.
"""

from __future__ import annotations

from typing import Any

from orchestrator import Context, KeelApp, RetryPolicy, Step, WorkflowDefinition
from orchestrator.examples import app as examples
from orchestrator.examples import invoices
from orchestrator.examples.invoices import Invoice

APP = "tests.integration.unknown_app:app"

app = KeelApp("keel-unknown-outcome-tests")
app.definitions.update(examples.definitions)
app.handlers.update(examples.handlers)

#: Short backoff, so a retry (when one is allowed) comes at once.
RETRY = RetryPolicy(
    max_attempts=4, initial_interval_ms=100, backoff_coefficient=2.0, max_interval_ms=400
)


def _invoice(ctx: Context) -> dict[str, Any]:
    return dict(ctx.input_dict)


def _posting(ctx: Context) -> dict[str, Any]:
    return {"posting_id": ctx.results["post"]["posting_id"]}


posting_without_query = app.workflow(
    WorkflowDefinition.dag(
        "posting_without_query",
        1,
        Invoice,
        [Step("post", "post_to_ledger", input=_invoice, retry=RETRY)],
        output=_posting,
        description="Post an invoice with no status query: an unknown outcome needs attention.",
    )
)

posting_retry_unknown = app.workflow(
    WorkflowDefinition.dag(
        "posting_retry_unknown",
        1,
        Invoice,
        [Step("post", "post_to_ledger", input=_invoice, retry=RETRY, on_unknown="retry")],
        output=_posting,
        description="Post an invoice; the ledger dedupes by key, so an unknown outcome retries.",
    )
)

assert invoices.post_to_ledger is not None  # the handlers come with the examples
