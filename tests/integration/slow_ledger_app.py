"""A test application: the ledger's ``post_to_ledger`` side effect with no status query.

Run by real orchestrator and worker processes with ``--app
tests.integration.slow_ledger_app:app`` (issue 47, item 4): a start-to-close of 1 s,
shorter than the ledger's answer, so the timeout fires while the posting is in flight.
"""

from __future__ import annotations

from typing import Any

from orchestrator import Context, KeelApp, RetryPolicy, Step, WorkflowDefinition
from orchestrator.examples import app as examples
from orchestrator.examples.invoices import Invoice

APP = "tests.integration.slow_ledger_app:app"

app = KeelApp("keel-slow-ledger-tests")
app.handlers["post_to_ledger"] = examples.handlers["post_to_ledger"]


def _posted(ctx: Context) -> Any:
    return ctx.results["post"]


app.workflow(
    WorkflowDefinition.dag(
        "slow_ledger_posting",
        1,
        Invoice,
        [Step("post", "post_to_ledger", start_to_close=1, retry=RetryPolicy(max_attempts=4))],
        output=_posted,
    )
)
