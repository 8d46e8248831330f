"""The application ``keel bench`` runs: the bundled examples plus ``three_step_local``.

``three_step_local`` is ``three_step`` with every step ``local=True`` (the same
handlers), so one run measures the remote and the local path side by side.
"""

from __future__ import annotations

from typing import Any

from orchestrator import Context, KeelApp, Step, WorkflowDefinition
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
