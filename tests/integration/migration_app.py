"""Two versions of a ticket workflow and a migration between them (docs/versioning.md).

v1: ``intake`` goes to ``on_hold`` (input ``hold``) or ``awaiting_approval``; both wait
for a signal; then ``stamping`` stamps ``v1``. v2 renames the wait ``approval`` (with a
one-hour timeout), has a ``priority`` in its input, and stamps ``v2`` with it. Its
migration from v1 maps only ``awaiting_approval`` (a run on hold is refused) and sets
the priority from the old input.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator import KeelApp, Migration, SignalWait, State, Step, Transition, WorkflowDefinition


class TicketV1(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket: int
    hold: bool = False


class TicketV2(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket: int
    priority: str = "normal"
    hold: bool = False


def _on_hold(ctx: Any) -> bool:
    return bool(ctx.input_dict.get("hold"))


def _stamp_v1(ctx: Any) -> dict[str, Any]:
    return {"path": "v1", "ticket": ctx.input_dict["ticket"]}


def _stamp_v2(ctx: Any) -> dict[str, Any]:
    return {
        "path": "v2",
        "ticket": ctx.input_dict["ticket"],
        "priority": ctx.input_dict["priority"],
    }


def _output(ctx: Any) -> dict[str, Any]:
    return dict(ctx.results["stamp"])


def _from_v1(ctx: Any) -> dict[str, Any]:
    """The v2 input: v1's, with a priority (tickets above 100 are urgent)."""
    old = ctx.input_dict
    return {"input": {**old, "priority": "urgent" if old["ticket"] > 100 else "normal"}}


V1 = WorkflowDefinition(
    "ticket",
    1,
    TicketV1,
    [
        State(
            "intake",
            transitions=[Transition("on_hold", when=_on_hold), Transition("awaiting_approval")],
        ),
        State("on_hold", wait=SignalWait("resume"), transitions=[Transition("awaiting_approval")]),
        State(
            "awaiting_approval", wait=SignalWait("approve"), transitions=[Transition("stamping")]
        ),
        State("stamping", steps=[Step("stamp", "stamp", input=_stamp_v1)], complete=_output),
    ],
)
V2 = WorkflowDefinition(
    "ticket",
    2,
    TicketV2,
    [
        State(
            "intake",
            transitions=[Transition("on_hold", when=_on_hold), Transition("approval")],
        ),
        State("on_hold", wait=SignalWait("resume"), transitions=[Transition("approval")]),
        State(
            "approval",
            wait=SignalWait("approve", timeout=3600, on_timeout="expired"),
            transitions=[Transition("stamping")],
        ),
        State("expired", fail="approval timed out"),
        State("stamping", steps=[Step("stamp", "stamp", input=_stamp_v2)], complete=_output),
    ],
    migrations=[Migration(1, states={"awaiting_approval": "approval"}, data=_from_v1)],
)

app = KeelApp("migrations")
app.workflow(V1)
app.workflow(V2)


@app.activity("stamp")
def stamp(req: dict[str, Any]) -> dict[str, Any]:
    return req
