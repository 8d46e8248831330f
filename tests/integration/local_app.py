"""A test application with local activities (``Step(..., local=True)``).

Run by real orchestrator and worker processes with ``--app tests.integration.local_app:app``
(see ``APP``), and by the in-memory rig of the unit tests.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator import Context, KeelApp, RetryPolicy, Step, WorkflowDefinition
from orchestrator.examples import app as examples
from orchestrator.examples import invoices
from orchestrator.examples.invoices import Invoice


class N(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int


class Seconds(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float


APP = "tests.integration.local_app:app"

app = KeelApp("keel-local-tests")
app.definitions.update(examples.definitions)
app.handlers.update(examples.handlers)

#: How many times each local-only handler ran in this process (unit tests read it).
CALLS: dict[str, int] = {}


def _result_of(step: str) -> Any:
    def take(ctx: Context) -> Any:
        return ctx.results[step]

    take.__qualname__ = f"result_of_{step}"
    return take


def _n(ctx: Context) -> dict[str, Any]:
    return dict(ctx.input_dict)


@app.activity("count_add_one")
def count_add_one(inp: dict[str, Any]) -> dict[str, Any]:
    CALLS["count_add_one"] = CALLS.get("count_add_one", 0) + 1
    return {"n": int(inp["n"]) + 1}


three_step_local = app.workflow(
    WorkflowDefinition.dag(
        "three_step_local",
        1,
        N,
        [
            Step("one", "add_one", local=True),
            Step("two", "double", after=["one"], input=_result_of("one"), local=True),
            Step("three", "square", after=["two"], input=_result_of("two"), local=True),
        ],
        output=_result_of("three"),
        description="three_step with every step local: ((n + 1) * 2) ** 2.",
    )
)

mixed_local_remote = app.workflow(
    WorkflowDefinition.dag(
        "mixed_local_remote",
        1,
        N,
        [
            Step("one", "count_add_one", input=_n, local=True),
            Step("two", "double", after=["one"], input=_result_of("one")),
            Step("three", "square", after=["two"], input=_result_of("two"), local=True),
        ],
        output=_result_of("three"),
        description="local, remote, local: ((n + 1) * 2) ** 2.",
    )
)


@app.activity("local_sleep")
async def local_sleep(req: dict[str, Any]) -> dict[str, Any]:
    CALLS["local_sleep"] = CALLS.get("local_sleep", 0) + 1
    await asyncio.sleep(float(req["seconds"]))
    CALLS["local_sleep_done"] = CALLS.get("local_sleep_done", 0) + 1
    return {"slept": req["seconds"]}


slow_local = app.workflow(
    WorkflowDefinition.dag(
        "slow_local",
        1,
        Seconds,
        [
            Step(
                "sleep",
                "local_sleep",
                input=_n,
                local=True,
                start_to_close=timedelta(seconds=0.3),
                retry=RetryPolicy(max_attempts=1),
                on_exhausted="fail",
            )
        ],
        output=_result_of("sleep"),
        description="A local step that sleeps past its start-to-close timeout.",
    )
)

slow_local_untimed = app.workflow(
    WorkflowDefinition.dag(
        "slow_local_untimed",
        1,
        Seconds,
        [
            Step(
                "sleep",
                "local_sleep",
                input=_n,
                local=True,
                retry=RetryPolicy(max_attempts=1),
                on_exhausted="fail",
            )
        ],
        output=_result_of("sleep"),
        description="A local step without a start-to-close timeout (bounded in-process).",
    )
)

local_posting = app.workflow(
    WorkflowDefinition.dag(
        "local_posting",
        1,
        Invoice,
        [
            Step(
                "post",
                "post_to_ledger",
                input=_n,
                local=True,
                retry=RetryPolicy(max_attempts=30, initial_interval_ms=100, max_interval_ms=400),
                start_to_close=timedelta(seconds=5),
                status_query="ledger_posting_status",
            ),
            Step("after", "double", after=["post"], input=lambda ctx: {"n": 1}, local=True),
        ],
        output=lambda ctx: {"posting_id": ctx.results["post"]["posting_id"]},
        description="A local @side_effect posting (status query remote), then a local step.",
    )
)

assert invoices.post_to_ledger is not None  # the handlers come with the examples
