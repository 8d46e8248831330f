"""Answering a run's queries from the read model (``KeelClient.query``, ``keel workflow query``).

The read model's row holds the run's whole folded state (``state_json``, written by the
projector in the same atomic step as the row's status and ``seq``), so a query reads one
Redis field, folds nothing and touches no Kafka: it writes nothing anywhere. The query's
function runs here, in the caller's process, with the caller's definition of the run's
``(name, version)`` (docs/workflows.md, "Queries").

Sealed values (docs/secrets.md) reach a query without their ciphertext (the token is
replaced by ``***`` before the state is read), and the answer's sealed values show as
``***``, as on every display path: no answer carries a sealed value, opened or not.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.application.app import KeelApp
from orchestrator.domain.authoring.queries import run_query
from orchestrator.domain.model.errors import NotFoundError, UnavailableError, UnknownWorkflowError
from orchestrator.domain.model.ids import check_workflow_id
from orchestrator.domain.model.state import WorkflowState
from orchestrator.io.redis.read_model import Projection, reachable
from orchestrator.trust.sealing import SEALED_KEY, mask

__all__ = ["QueryAnswer", "answer_query", "without_ciphertext"]

#: A sealed envelope's token at any depth of JSON-in-JSON text (``\\"`` before the quotes).
_TOKEN = re.compile(r"(" + re.escape(SEALED_KEY) + r'\\*"\s*:\s*\\*")[A-Za-z0-9_=-]+')


@dataclass(frozen=True)
class QueryAnswer:
    """A query's ``value``, and the run it was answered from: its ``status``, current
    ``state`` and ``seq``, the last event of its history the answer reflects."""

    workflow_id: str
    run_id: str
    status: str
    state: str | None
    seq: int
    value: Any

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def without_ciphertext(state: WorkflowState) -> WorkflowState:
    """``state`` with every sealed value's token replaced by ``***`` (still a sealed
    value to the models that declare it, opening to nothing)."""
    text = state.to_json()
    if SEALED_KEY not in text:
        return state
    return WorkflowState.from_json(_TOKEN.sub(r"\g<1>***", text))


def answer_query(
    projection: Projection, app: KeelApp, workflow_id: str, name: str, args: Any = None
) -> QueryAnswer:
    """Answer query ``name`` (with ``args``, a JSON value or a model) over the state of
    run ``workflow_id`` that the read model holds; nothing is written."""
    check_workflow_id(workflow_id)
    with reachable(projection.url):
        found = projection.load_states([workflow_id]).get(workflow_id)
    if found is None:
        if projection.get(workflow_id) is None:
            raise NotFoundError(f"workflow '{workflow_id}' does not exist; query '{name}' refused")
        raise UnavailableError(
            f"the read model holds no state for workflow '{workflow_id}' (written by an older "
            "projector); `keel projections rebuild` writes it"
        )
    try:
        definition = app.get(found.name, found.version)
    except UnknownWorkflowError as exc:
        raise UnknownWorkflowError(
            f"workflow '{workflow_id}' runs '{found.name}' v{found.version}, which this "
            f"application does not define ({exc}); query '{name}' refused"
        ) from None
    value = run_query(definition, without_ciphertext(found), name, args)
    return QueryAnswer(
        workflow_id=workflow_id,
        run_id=found.run_id,
        status=str(found.status),
        state=found.current_state,
        seq=found.seq,
        value=mask(value),
    )
