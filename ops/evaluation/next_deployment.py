"""The deployment ``old_schema`` moves a batch to mid-flight: each variant's workflow at
version 2 beside its version 1 (docs/evaluation.md, "How a batch runs").

The processes load it as ``--app ops.evaluation.next_deployment:backbone`` (or
``:agent``). Version 2 is version 1's states (``next_version``) with a migration from
version 1 at the waits for a person: the backbone's runs waiting for a clerk's
correction or an approval may move to it at their wait, and go on there; the agent has
no wait, so its runs in flight finish on version 1, which the new deployment still
holds. Runs started after the deployment start on version 2.
"""

from __future__ import annotations

from ops.evaluation.next_version import next_version
from orchestrator import KeelApp
from orchestrator.examples.invoice_agent import app as agent_app
from orchestrator.examples.invoice_pipeline import app as pipeline_app

__all__ = ["BACKBONE_WAITS", "agent", "backbone"]

#: The backbone's waits, each migrated to itself on version 2.
BACKBONE_WAITS = {"correct": "correct", "approval": "approval"}


backbone = KeelApp("keel-invoice-pipeline-v2").include(pipeline_app)
backbone.workflow(next_version(pipeline_app.get("invoice_pipeline", 1), BACKBONE_WAITS))

agent = KeelApp("keel-invoice-agent-v2").include(agent_app)
agent.workflow(next_version(agent_app.get("invoice_agent", 1), {}))
