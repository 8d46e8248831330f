"""The deployment ``old_schema`` moves a batch to mid-flight: each variant's workflow at
version 2 beside its version 1 (docs/evaluation.md, "How a batch runs").

The processes load it as ``--app ops.evaluation.next_deployment:backbone`` (or
``:agent``). Version 2 is version 1's states with a migration from version 1: the
backbone's runs waiting for a person (a clerk's correction, an approval) may move to it
at their wait, and go on there; the agent has no wait, so its runs in flight finish on
version 1, which the new deployment still holds. Runs started after the deployment start
on version 2.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator import KeelApp, Migration, WorkflowDefinition
from orchestrator.examples.invoice_agent import app as agent_app
from orchestrator.examples.invoice_pipeline import app as pipeline_app

__all__ = ["BACKBONE_WAITS", "agent", "backbone", "next_version"]

#: The backbone's waits, each migrated to itself on version 2.
BACKBONE_WAITS = {"correct": "correct", "approval": "approval"}


def next_version(v1: WorkflowDefinition, waits: Mapping[str, str]) -> WorkflowDefinition:
    """Version 2 of ``v1``: the same states, and a migration from version 1 at ``waits``
    (none: runs of version 1 finish on it)."""
    return WorkflowDefinition(
        v1.name,
        v1.version + 1,
        v1.input_model,
        list(v1.states.values()),
        initial=v1.initial,
        output_model=v1.output_model,
        description=f"{v1.description} (v2, deployed by keel evaluate's old_schema)",
        on_cancel=v1.on_cancel,
        compensation_after_irreversible=v1.compensation_after_irreversible,
        compensation_role=v1.compensation_role,
        migrations=[Migration(v1.version, states=dict(waits))] if waits else [],
        queries=list(v1.queries.values()),
        search_attributes=list(v1.search_attributes.values()),
    )


backbone = KeelApp("keel-invoice-pipeline-v2").include(pipeline_app)
backbone.workflow(next_version(pipeline_app.get("invoice_pipeline", 1), BACKBONE_WAITS))

agent = KeelApp("keel-invoice-agent-v2").include(agent_app)
agent.workflow(next_version(agent_app.get("invoice_agent", 1), {}))
