"""Two versions of one workflow, for the pinned-versions test (tests/integration/test_versions.py).

``app_v1`` is the code before the upgrade (v1 only); ``app`` is the code after it (v1 and
v2 side by side). v1 waits for signal ``go`` and then stamps ``v1``; v2 stamps ``v2`` at
once, so each run's history and output show which version decided it.

``gated`` (tests/integration/test_parking.py) waits for ``go`` in both versions, so its v2
runs are in flight when a process holding only v1 takes their partitions over.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator import KeelApp, SignalWait, State, Step, Transition, WorkflowDefinition


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order: int


def _stamp(version: str) -> Any:
    def stamp_input(ctx: Any) -> dict[str, Any]:
        return {"path": version, "order": ctx.input_dict["order"]}

    stamp_input.__qualname__ = f"stamp_input_{version}"
    return stamp_input


def _output(ctx: Any) -> dict[str, Any]:
    return dict(ctx.results["stamp"])


V1 = WorkflowDefinition(
    "pinned",
    1,
    Order,
    [
        State("waiting", wait=SignalWait("go"), transitions=[Transition("stamping")]),
        State("stamping", steps=[Step("stamp", "stamp", input=_stamp("v1"))], complete=_output),
    ],
)
V2 = WorkflowDefinition(
    "pinned",
    2,
    Order,
    [State("stamping", steps=[Step("stamp", "stamp", input=_stamp("v2"))], complete=_output)],
)


def _gated(version: int) -> WorkflowDefinition:
    path = f"v{version}"
    return WorkflowDefinition(
        "gated",
        version,
        Order,
        [
            State("waiting", wait=SignalWait("go"), transitions=[Transition("stamping")]),
            State("stamping", steps=[Step("stamp", "stamp", input=_stamp(path))], complete=_output),
        ],
    )


GATED_V1 = _gated(1)
GATED_V2 = _gated(2)


def _register(app: KeelApp) -> KeelApp:
    @app.activity("stamp")
    def stamp(req: dict[str, Any]) -> dict[str, Any]:
        return req

    return app


app_v1 = _register(KeelApp("versions-before"))
app_v1.workflow(V1)
app_v1.workflow(GATED_V1)
app = _register(KeelApp("versions-after"))
app.workflow(V1)
app.workflow(V2)
app.workflow(GATED_V1)
app.workflow(GATED_V2)
