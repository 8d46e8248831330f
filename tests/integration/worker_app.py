"""A test application: the bundled examples plus activities that misbehave on purpose.

Run by real orchestrator and worker processes with
``--app tests.integration.worker_app:app`` (see ``APP``).
"""

from __future__ import annotations

from typing import Any

from orchestrator import Context, KeelApp, RetryPolicy, Step, WorkflowDefinition, side_effect
from orchestrator.examples import app as examples
from orchestrator.examples.invoices import Invoice, Posting, post_to_ledger

APP = "tests.integration.worker_app:app"

app = KeelApp("keel-worker-tests")
app.definitions.update(examples.definitions)
app.handlers.update(examples.handlers)


@app.activity("post_then_misreport", input=Invoice, output=Posting)
@side_effect
async def post_then_misreport(invoice: Invoice) -> dict[str, Any]:
    """Posts to the ledger for real, then returns a result that fails its output model."""
    posting = await post_to_ledger(invoice)
    return {"posting": posting.posting_id}


@app.activity("huge_result")
def huge_result(req: dict[str, Any]) -> dict[str, Any]:
    """Returns a result larger than MAX_PAYLOAD_BYTES (the size asked for)."""
    return {"blob": "x" * int(req["bytes"])}


def _invoice(ctx: Context) -> dict[str, Any]:
    return dict(ctx.input_dict)


misreported_posting = app.workflow(
    WorkflowDefinition.dag(
        "misreported_posting",
        1,
        Invoice,
        [
            Step(
                "post",
                "post_then_misreport",
                input=_invoice,
                retry=RetryPolicy(max_attempts=3, initial_interval_ms=100),
            )
        ],
        output=lambda ctx: ctx.results["post"],
        description="A posting whose handler returns a result of the wrong shape.",
    )
)
