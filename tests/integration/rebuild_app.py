"""Every bundled workload on one application, for the rebuild-equality test.

``test_rebuild_equality.py`` needs one orchestrator and one worker to run activities,
human tasks, compensations, a cross-workflow saga, LLM nodes, dead letters, a recorded
migration and a continue-as-new run together, so this module registers, on one
``KeelApp``, the definitions, handlers and declarations of the bundled example
application, the LLM example application and the saga and migration test applications,
plus ``counter`` (a run that continues as new after every third ``add`` signal).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator import KeelApp, SignalWait, State, Transition, WorkflowDefinition
from orchestrator.examples import app as examples_app
from orchestrator.examples.llm_invoices import app as llm_app
from tests.integration.migration_app import app as migration_app
from tests.integration.sagas_app import app as sagas_app

app = KeelApp("rebuild-equality")

for source in (examples_app, llm_app, sagas_app, migration_app):
    app.include(source)

#: Signals a run of ``counter`` takes before it continues as new.
EVERY = 3


class Total(BaseModel):
    total: int = 0


def _received(ctx: Any) -> int:
    return len(ctx.signals.get("add", []))


def _carry(ctx: Any) -> dict[str, int]:
    return {"total": ctx.input.total + sum(p["n"] for p in ctx.signals["add"])}


app.workflow(
    WorkflowDefinition(
        "counter",
        1,
        Total,
        [
            State(
                "listen",
                wait=SignalWait("add"),
                transitions=[Transition("listen", when=lambda ctx: _received(ctx) < EVERY)],
                continue_as_new=_carry,
            )
        ],
    )
)
