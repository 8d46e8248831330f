"""The built-in workflow ``keel.schedule``: one run per schedule (docs/schedules.md).

The run loops between two states. ``tick`` runs the tick activity (a worker runs it:
it reads the clock, applies the operator's controls, starts the due runs and records
all of it as its result); ``sleep`` waits for a ``control`` signal (pause, resume,
delete) with a durable timeout until the next fire time, then ticks again. A deleted
schedule ends ``completed`` in state ``deleted``. Every :data:`ROLLOVER_TICKS` ticks
the run continues as new with its state as input, so its history stays short.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from orchestrator.application.app import KeelApp
from orchestrator.domain.authoring.definitions import (
    RetryPolicy,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)
from orchestrator.domain.authoring.queries import Query
from orchestrator.domain.authoring.run_context import Context
from orchestrator.schedules.planning import Carry
from orchestrator.schedules.spec import ScheduleSpec

__all__ = [
    "CONTROL_SIGNAL",
    "DESCRIBE_QUERY",
    "ROLLOVER_TICKS",
    "SCHEDULE_WORKFLOW",
    "TICK_ACTIVITY",
    "ScheduleInput",
    "install_definition",
    "schedule_definition",
]

SCHEDULE_WORKFLOW = "keel.schedule"
TICK_ACTIVITY = "keel.schedule.tick"
CONTROL_SIGNAL = "control"
DESCRIBE_QUERY = "describe"
#: Ticks per run before it continues as new.
ROLLOVER_TICKS = 100


class ScheduleInput(BaseModel):
    """A schedule run's input: the spec, and (after ``continue_as_new``) its state and
    the controls that arrived during the last tick of the run before."""

    spec: ScheduleSpec
    carry: Carry | None = None
    pending: list[dict[str, Any]] = Field(default_factory=list)


def _latest(ctx: Context) -> dict[str, Any] | None:
    return ctx.results.get("tick")


def tick_input(ctx: Context) -> dict[str, Any]:
    """The spec, the state so far and every control not applied yet."""
    latest = _latest(ctx)
    received = list(ctx.signals.get(CONTROL_SIGNAL, []))
    if latest is None:
        carry = ctx.input_dict.get("carry")
        controls = list(ctx.input_dict.get("pending", []))
        seen = 0
    else:
        carry, controls, seen = latest["carry"], [], latest["signals_seen"]
    return {
        "spec": ctx.input_dict["spec"],
        "carry": carry,
        "controls": controls + received[seen:],
        "signals_seen": len(received),
    }


def is_deleted(ctx: Context) -> bool:
    latest = _latest(ctx)
    return bool(latest and latest["carry"]["deleted"])


def keeps_run(ctx: Context) -> bool:
    return ctx.visits.get("tick", 0) < ROLLOVER_TICKS


def wake_in_s(ctx: Context) -> float:
    latest = _latest(ctx)
    return latest["wake_in_ms"] / 1000 if latest else 0.0


def carried(ctx: Context) -> dict[str, Any]:
    """The next run's input: the spec, the state, the controls not applied yet."""
    latest = _latest(ctx)
    assert latest is not None  # the tick state ran its step
    received = list(ctx.signals.get(CONTROL_SIGNAL, []))
    return {
        "spec": ctx.input_dict["spec"],
        "carry": latest["carry"],
        "pending": received[latest["signals_seen"] :],
    }


def deleted_output(ctx: Context) -> dict[str, Any]:
    latest = _latest(ctx)
    carry = latest["carry"] if latest else {}
    return {"deleted": True, "started": carry.get("started", 0), "skipped": carry.get("skipped", 0)}


def describe(ctx: Any) -> dict[str, Any]:
    """The ``describe`` query: the spec, the state as of the last tick, when it fires."""
    latest = _latest(ctx)
    return {
        "spec": ctx.input_dict["spec"],
        "carry": latest["carry"] if latest else ctx.input_dict.get("carry"),
        "next_fire_ms": latest["next_fire_ms"] if latest else None,
        "last_tick_at_ms": latest["now_ms"] if latest else None,
    }


def schedule_definition() -> WorkflowDefinition:
    """``keel.schedule`` v1."""
    return WorkflowDefinition(
        SCHEDULE_WORKFLOW,
        1,
        ScheduleInput,
        [
            State(
                "tick",
                steps=[
                    Step(
                        "tick",
                        TICK_ACTIVITY,
                        input=tick_input,
                        retry=RetryPolicy(max_attempts=20, max_interval_ms=30_000),
                        start_to_close=120,
                    )
                ],
                transitions=[
                    Transition("deleted", when=is_deleted),
                    Transition("sleep", when=keeps_run),
                ],
                continue_as_new=carried,
            ),
            State(
                "sleep",
                wait=SignalWait(CONTROL_SIGNAL, timeout=wake_in_s, on_timeout="tick"),
                transitions=[Transition("tick")],
            ),
            State("deleted", complete=deleted_output),
        ],
        description="A durable schedule (docs/schedules.md)",
        queries=[Query(DESCRIBE_QUERY, describe)],
    )


_DEFINITION = schedule_definition()


def install_definition(app: KeelApp) -> KeelApp:
    """Make ``app`` know ``keel.schedule`` (its tick activity declared, run by a worker
    whose application has the handler: ``orchestrator.client.schedule_ticks``)."""
    if (SCHEDULE_WORKFLOW, 1) not in app.definitions:
        app.workflow(_DEFINITION)
    if TICK_ACTIVITY not in app.handlers:
        app.declare_activity(TICK_ACTIVITY)
    return app
