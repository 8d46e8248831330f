"""Child-workflow examples (docs/child-workflows.md).

* ``checks_batch`` v1: one ``parallel_checks`` child run per number of the input, 5 at a
  time, each with its own derived workflow id (``<parent>:run.1.checks.<i>``); the output
  is every child's output, in input order.
* ``timers_batch`` v1: one ``timer_demo`` child per duration, all at once; cancelling the
  parent cancels the children still waiting (``parent_close="cancel"``, the default).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import Context, ParentClosePolicy, State, Step, WorkflowDefinition
from orchestrator.examples.registry import app


class Numbers(BaseModel):
    model_config = ConfigDict(extra="forbid")
    numbers: list[int] = Field(max_length=1000)


class Durations(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: list[float] = Field(max_length=1000)


def _numbers(ctx: Context[Numbers]) -> list[dict[str, int]]:
    return [{"n": n} for n in ctx.input.numbers]


def _durations(ctx: Context[Durations]) -> list[dict[str, float]]:
    return [{"seconds": s} for s in ctx.input.seconds]


def _results(step: str) -> Any:
    def output(ctx: Context[Any]) -> dict[str, Any]:
        return {"results": ctx.results[step]}

    output.__qualname__ = f"results_of_{step}"
    return output


checks_batch = app.workflow(
    WorkflowDefinition(
        "checks_batch",
        1,
        Numbers,
        [
            State(
                "run",
                steps=[
                    Step.child("checks", "parallel_checks", for_each=_numbers, max_concurrency=5)
                ],
                complete=_results("checks"),
            )
        ],
        description="Run parallel_checks as a child workflow per number, 5 at a time.",
    )
)

timers_batch = app.workflow(
    WorkflowDefinition(
        "timers_batch",
        1,
        Durations,
        [
            State(
                "run",
                steps=[
                    Step.child(
                        "timers",
                        "timer_demo",
                        for_each=_durations,
                        parent_close=ParentClosePolicy.CANCEL,
                    )
                ],
                complete=_results("timers"),
            )
        ],
        description="Wait on a timer_demo child per duration; a cancel reaches the children.",
    )
)
