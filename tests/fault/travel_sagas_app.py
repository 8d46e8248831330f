"""The bundled examples plus one saga reacting to ``travel_booking``: when a trip ends
compensated, it starts a follow-up workflow (``three_step``) for it. Used to SIGKILL the
orchestrator and the saga manager while compensations run."""

from __future__ import annotations

from orchestrator import Emit, KeelApp, Saga, SagaFact, SagaView, StartWorkflow
from orchestrator.examples import app as examples

app = KeelApp("travel-sagas")
app.definitions.update(examples.definitions)
app.handlers.update(examples.handlers)


def followup_id(trip_workflow_id: str) -> str:
    return f"followup-{trip_workflow_id}"


def _react(view: SagaView, fact: SagaFact) -> list[Emit]:
    start = StartWorkflow("three_step", 1, '{"n": 1}')
    return [Emit(followup_id(fact.workflow_id), start)]


app.saga(
    Saga(
        "trip_followup",
        reacts_to={"travel_booking": {"WorkflowCompensated"}},
        correlate=lambda workflow_id, data: workflow_id,
        react=_react,
    ),
)
