"""A test application for durable schedules (docs/schedules.md): ``stamp`` completes at
once with its input, so a schedule's runs end before the next tick; ``slow_stamp`` waits
2.5 s on a durable timer first, so runs of a schedule every second overlap. Run with
``--app tests.integration.schedules_app:app``."""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator import KeelApp, State, TimerWait, Transition, WorkflowDefinition

APP = "tests.integration.schedules_app:app"

app = KeelApp("keel-schedule-tests")


class Stamp(BaseModel):
    note: str = ""


app.workflow(
    WorkflowDefinition("stamp", 1, Stamp, [State("done", complete=lambda ctx: ctx.input_dict)])
)
app.workflow(
    WorkflowDefinition(
        "slow_stamp",
        1,
        Stamp,
        [
            State("wait", wait=TimerWait(2.5), transitions=[Transition("done")]),
            State("done", complete=lambda ctx: ctx.input_dict),
        ],
    )
)
