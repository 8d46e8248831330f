"""A test application for the parent-close policies (docs/child-workflows.md).

``seat_hold`` holds a seat (an effect with a compensation, ``release_seat``), then waits
on a long timer. ``seats_cancel`` and ``seats_terminate`` map it over their input as
child runs with ``parent_close="cancel"`` and ``"terminate"``: cancelling either parent
stops its children, the first so that each releases its seat, the second at once with
the seat kept. Run with ``--app tests.integration.parent_close_app:app``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from orchestrator import (
    Compensation,
    Context,
    KeelApp,
    ParentClosePolicy,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
)

APP = "tests.integration.parent_close_app:app"

app = KeelApp("keel-parent-close-tests")


class Seat(BaseModel):
    seat: str


class Seats(BaseModel):
    seats: list[str]


@app.activity("hold_seat", input=Seat)
def hold_seat(seat: Seat) -> dict[str, Any]:
    return {"hold": f"H-{seat.seat}"}


@app.activity("release_seat")
def release_seat(data: dict[str, Any]) -> dict[str, Any]:
    return {"released": data["hold"]}


app.workflow(
    WorkflowDefinition(
        "seat_hold",
        1,
        Seat,
        [
            State(
                "hold",
                steps=[
                    Step(
                        "hold",
                        "hold_seat",
                        compensation=Compensation("release_seat", input=lambda r: r),
                    )
                ],
                transitions=[Transition("wait")],
            ),
            State("wait", wait=TimerWait(timedelta(hours=1)), complete=lambda ctx: {}),
        ],
    )
)


def _seats(ctx: Context) -> list[dict[str, str]]:
    return [{"seat": s} for s in ctx.input_dict["seats"]]


for name, policy in (
    ("seats_cancel", ParentClosePolicy.CANCEL),
    ("seats_terminate", ParentClosePolicy.TERMINATE),
):
    app.workflow(
        WorkflowDefinition(
            name,
            1,
            Seats,
            [
                State(
                    "run",
                    steps=[Step.child("seats", "seat_hold", for_each=_seats, parent_close=policy)],
                    complete=lambda ctx: {"holds": ctx.results["seats"]},
                )
            ],
        )
    )
