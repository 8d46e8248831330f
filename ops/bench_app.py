"""The application ``keel bench`` runs: the bundled examples plus ``three_step_local``
and ``ledger_step``.

``three_step_local`` is ``three_step`` with every step ``local=True`` (the same
handlers), so one run measures the remote and the local path side by side.
``ledger_step`` adds one and posts the result to a ledger, a side effect whose books
(a Redis hash counting calls per idempotency key, under the run's prefix) show any
duplicate effect: the rolling restart of ``keel bench --scale`` reads them.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import redis

from orchestrator import ActivityContext, Context, KeelApp, Step, WorkflowDefinition, side_effect
from orchestrator.examples import NInput
from orchestrator.examples import app as examples

APP = "ops.bench_app:app"

app = KeelApp("keel-bench")
app.definitions.update(examples.definitions)
app.handlers.update(examples.handlers)


def _result_of(step: str) -> Any:
    def take(ctx: Context) -> Any:
        return ctx.results[step]

    take.__qualname__ = f"result_of_{step}"
    return take


three_step_local = app.workflow(
    WorkflowDefinition.dag(
        "three_step_local",
        1,
        NInput,
        [
            Step("one", "add_one", local=True),
            Step("two", "double", after=["one"], input=_result_of("one"), local=True),
            Step("three", "square", after=["two"], input=_result_of("two"), local=True),
        ],
        output=_result_of("three"),
        description="three_step with every step run inside the orchestrator.",
    )
)


def ledger_key(prefix: str) -> str:
    """The ledger's books: a hash of calls per idempotency key, under the run's prefix."""
    return f"keel:{prefix}:bench-ledger"


@cache
def _books() -> redis.Redis:
    return redis.Redis.from_url(os.environ["KEEL_REDIS_URL"])


@app.activity("ledger_post", input=NInput, output=NInput)
@side_effect
def ledger_post(inp: NInput) -> NInput:
    """Post ``n`` once per key: the books count every call, so a second is a duplicate."""
    from orchestrator.activity import context

    ctx: ActivityContext = context()
    _books().hincrby(ledger_key(os.environ["KEEL_TOPIC_PREFIX"]), ctx.idempotency_key, 1)
    return inp


ledger_step = app.workflow(
    WorkflowDefinition.dag(
        "ledger_step",
        1,
        NInput,
        [
            Step("one", "add_one"),
            Step("post", "ledger_post", after=["one"], input=_result_of("one")),
        ],
        output=_result_of("post"),
        description="add_one, then a side effect posting the result to a ledger.",
    )
)
