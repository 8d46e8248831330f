"""A test application: a fan-out of synchronous items that only pass when run at once.

Run by real orchestrator and worker processes with ``--app
tests.integration.sync_fan_out_app:app``. Each item waits at a barrier of ``ITEMS``
parties in the worker: one at a time, the first wait times out and the run fails.
"""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel

from orchestrator import ItemFailurePolicy, KeelApp, RetryPolicy, State, Step, WorkflowDefinition

APP = "tests.integration.sync_fan_out_app:app"
ITEMS = 4
#: What a worker that ran the items one at a time would cost the test before it fails.
BARRIER_S = 20.0

app = KeelApp("keel-sync-fan-out-tests")
_barrier = threading.Barrier(ITEMS, timeout=BARRIER_S)


class Batch(BaseModel):
    items: list[int]


@app.activity("meet")
def meet(item: int) -> dict[str, Any]:
    """Blocks (a plain ``def``) until every item of the batch has started."""
    _barrier.wait()
    return {"item": item, "thread": threading.current_thread().name}


app.workflow(
    WorkflowDefinition(
        "sync_fan_out",
        1,
        Batch,
        [
            State(
                "meet",
                steps=[
                    Step(
                        "meet",
                        "meet",
                        for_each=lambda ctx: ctx.input.items,
                        max_concurrency=ITEMS,
                        on_item_failure=ItemFailurePolicy.FAIL_FAST,
                        retry=RetryPolicy(max_attempts=1),
                        on_exhausted="fail",
                    )
                ],
                complete=lambda ctx: {"met": ctx.results["meet"]},
            )
        ],
    )
)
