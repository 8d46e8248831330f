"""The next version of a workflow, as ``keel evaluate``'s ``old_schema`` deploys it
mid-flight (docs/evaluation.md, "How a batch runs").

Version N+1 is version N's states with a migration from version N at the states given:
a run of version N waiting there may move to version N+1 at its wait and go on there; a
run elsewhere finishes on version N, which the new deployment still holds. The same
definition built twice has the same digest, so the client that asks for a migration and
the orchestrator that checks it agree on what version N+1 is.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator import KeelApp, Migration, WorkflowDefinition

__all__ = ["deployed", "next_version", "wait_states"]


def next_version(current: WorkflowDefinition, waits: Mapping[str, str]) -> WorkflowDefinition:
    """The version after ``current``: the same states, and a migration from ``current``
    at ``waits`` (none: runs of ``current`` finish on it)."""
    return WorkflowDefinition(
        current.name,
        current.version + 1,
        current.input_model,
        list(current.states.values()),
        initial=current.initial,
        output_model=current.output_model,
        description=f"{current.description} (v{current.version + 1}, deployed by keel "
        "evaluate's old_schema)",
        on_cancel=current.on_cancel,
        compensation_after_irreversible=current.compensation_after_irreversible,
        compensation_role=current.compensation_role,
        migrations=[Migration(current.version, states=dict(waits))] if waits else [],
        queries=list(current.queries.values()),
        search_attributes=list(current.search_attributes.values()),
    )


def wait_states(definition: WorkflowDefinition) -> dict[str, str]:
    """Every state of ``definition`` that waits (a timer, a signal, a person), mapped to
    itself: where a run can rest, and so be migrated."""
    return {name: name for name, state in definition.states.items() if state.wait is not None}


def deployed(app: KeelApp, workflow: str) -> KeelApp:
    """``app`` with the next version of ``workflow``'s latest, migrated at its waits."""
    current = app.get(workflow)
    out = KeelApp(f"{app.name} (v{current.version + 1} of {workflow} deployed)").include(app)
    out.workflow(next_version(current, wait_states(current)))
    return out
