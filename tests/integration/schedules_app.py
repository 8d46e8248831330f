"""A test application for durable schedules (docs/schedules.md): ``stamp`` completes at
once with its input, so a schedule's runs end before the next tick. Run with
``--app tests.integration.schedules_app:app``."""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator import KeelApp, State, WorkflowDefinition

APP = "tests.integration.schedules_app:app"

app = KeelApp("keel-schedule-tests")


class Stamp(BaseModel):
    note: str = ""


app.workflow(
    WorkflowDefinition("stamp", 1, Stamp, [State("done", complete=lambda ctx: ctx.input_dict)])
)
