"""A run's parent and children, read from its history (docs/child-workflows.md).

A child run's ``WorkflowStarted`` names its parent and the parent's activity awaiting
it; a parent's ``ActivityScheduled`` of a child step (activity type ``keel.child:<name>``)
carries the child's workflow id as its idempotency key. ``keel workflow show`` and
``KeelClient.show`` link both ways with these, and the read model gives each child's
status; a child whose start was refused (its id names another run: the step failed with
``ChildWorkflowIdInUse``) shows the refusal, which names that run's workflow, instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.domain.lifecycle.run_scope import CHILD_ID_IN_USE
from orchestrator.domain.model.keys import CHILD_ACTIVITY_PREFIX

__all__ = ["children_of", "parent_of"]


def parent_of(history: list[dict[str, Any]]) -> dict[str, str] | None:
    """``{"workflow_id", "activity_id"}`` of the parent that started this run, or None."""
    for h in history:
        if h["type"] == "WorkflowStarted" and h["data"].get("parent_workflow_id"):
            data = h["data"]
            return {
                "workflow_id": data["parent_workflow_id"],
                "activity_id": data.get("parent_activity_id") or "",
            }
    return None


def children_of(
    history: list[dict[str, Any]], status_of: Callable[[list[str]], list[str | None]]
) -> list[dict[str, Any]]:
    """Each child run this run started, in start order, with its status (None: not in the
    read model yet); ``status_of`` reads the statuses of many workflow ids at once."""
    found = [
        {
            "workflow_id": h["data"]["idempotency_key"],
            "workflow": h["data"]["activity_type"][len(CHILD_ACTIVITY_PREFIX) :],
            "activity_id": h["data"]["activity_id"],
        }
        for h in history
        if h["type"] == "ActivityScheduled"
        and str(h["data"].get("activity_type", "")).startswith(CHILD_ACTIVITY_PREFIX)
        and h["data"].get("attempt") == 1
    ]
    statuses = status_of([c["workflow_id"] for c in found]) if found else []
    refused = {
        h["data"]["activity_id"]: h["data"].get("message", "")
        for h in history
        if h["type"] == "ActivityFailed" and h["data"].get("error_type") == CHILD_ID_IN_USE
    }
    return [
        # a refused start: the id's run is another's, its status is not this child's
        {**c, "status": f"start refused: {refused[c['activity_id']]}"}
        if c["activity_id"] in refused
        else {**c, "status": st}
        for c, st in zip(found, statuses, strict=True)
    ]
