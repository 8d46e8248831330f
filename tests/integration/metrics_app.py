"""A test application with a known workload for the metrics (tests/integration/test_metrics.py).

``metered`` runs one step, ``metered.work``: ``ok`` completes, ``flaky`` fails transiently
on its first attempt and completes on its second, ``fail`` fails permanently.
``metered_saga`` books (compensable by ``metered.unbook``), then a charge fails
permanently: the booking is undone and the run ends ``compensated``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator import (
    KeelApp,
    PermanentError,
    RetryPolicy,
    Step,
    TransientError,
    WorkflowDefinition,
    activity,
)

APP = "tests.integration.metrics_app:app"
app = KeelApp("metrics-test")


class Job(BaseModel):
    mode: str = "ok"


@app.activity("metered.work", input=Job)
def work(job: Job) -> dict[str, Any]:
    if job.mode == "fail":
        raise PermanentError("refused for good")
    if job.mode == "flaky" and activity.context().attempt == 1:
        raise TransientError("not this time")
    return {"done": job.mode}


@app.activity("metered.book", input=Job)
def book(job: Job) -> dict[str, Any]:
    return {"booked": True}


@app.activity("metered.unbook", input=Job)
def unbook(job: Job) -> dict[str, Any]:
    return {"unbooked": True}


@app.activity("metered.charge", input=Job)
def charge(job: Job) -> dict[str, Any]:
    raise PermanentError("card declined")


def _job(ctx: Any) -> dict[str, Any]:
    return dict(ctx.input_dict)


QUICK_RETRY = RetryPolicy(max_attempts=3, initial_interval_ms=50, max_interval_ms=100)

app.workflow(
    WorkflowDefinition.dag(
        "metered",
        1,
        Job,
        [Step("work", "metered.work", input=_job, retry=QUICK_RETRY)],
        output=lambda ctx: ctx.results["work"],
    )
)
app.workflow(
    WorkflowDefinition.dag(
        "metered_saga",
        1,
        Job,
        [
            Step("book", "metered.book", input=_job, compensation="metered.unbook"),
            Step("charge", "metered.charge", input=_job, after="book"),
        ],
        output=lambda ctx: ctx.results["charge"],
    )
)
