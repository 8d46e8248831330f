"""A parent that starts a child and continues as new, for issue 44 on a real broker.

``scope_parent`` v1 (``--app tests.integration.run_scope_app:app``): each run starts a
``scope_kid`` child under the derived id (no ``workflow_id=``), then waits for signal
``go`` with a ``TIMEOUT_S`` timeout. Run 1 is signalled and continues as new with round 2;
run 2 is not, and its own timeout ends it in state ``timed_out``. Round 2's child pauses
``PAUSE_S`` on a durable timer first, so run 2's timeout is armed that much later than
run 1's: a timer entry of run 1 left in the engine's heap would fire run 2's wait early.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from orchestrator import KeelApp, SignalWait, State, Step, TimerWait, Transition, WorkflowDefinition

__all__ = ["APP", "PAUSE_S", "TIMEOUT_S", "app"]

APP = "tests.integration.run_scope_app:app"
#: How long each run of the parent waits for ``go``.
TIMEOUT_S = 5
#: How long round 2's child pauses before it completes.
PAUSE_S = 3


class Round(BaseModel):
    round: int = 1


def _round(ctx) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {"round": ctx.input.round}


app = KeelApp("keel-run-scope-tests")
app.workflow(
    WorkflowDefinition(
        "scope_kid",
        1,
        Round,
        [
            State(
                "start",
                transitions=[Transition("pause", when=lambda ctx: ctx.input.round >= 2)],
                complete=_round,
            ),
            State("pause", wait=TimerWait(timedelta(seconds=PAUSE_S)), complete=_round),
        ],
    )
)
app.workflow(
    WorkflowDefinition(
        "scope_parent",
        1,
        Round,
        [
            State(
                "run",
                steps=[Step.child("kid", "scope_kid", input=_round)],
                wait=SignalWait("go", timeout=timedelta(seconds=TIMEOUT_S), on_timeout="timed_out"),
                continue_as_new=lambda ctx: {"round": ctx.input.round + 1},
            ),
            State("timed_out", complete=_round),
        ],
    )
)
