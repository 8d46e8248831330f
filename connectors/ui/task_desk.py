"""The inbox's side of the UI: the tasks a signed-in actor may decide, and a decision bound
to the operation digest the page showed.

A decision goes through the same :class:`~orchestrator.client.human_task_decisions.TaskDesk`
as ``POST /tasks/{token}/decision`` (connectors/human_task_api.py), with the task's token
issued here for an actor holding one of its roles; the task token never reaches the
browser. Whatever the task API would refuse is refused with its words: a page whose digest
is no longer the task's, a task decided already, a run that has ended.
"""

from __future__ import annotations

import re
from typing import Any

from connectors.auth import Actor
from connectors.human_task_api import TaskApi
from connectors.ui.sessions import FlashLevel
from orchestrator.client.human_task_decisions import MAX_REASON_CHARS, DecisionStatus
from orchestrator.domain.model.vocabulary import HumanDecision

__all__ = ["TaskDecisions"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class TaskDecisions:
    def __init__(self, api: TaskApi) -> None:
        self.api = api

    @staticmethod
    def may_decide(task: dict[str, Any], actor: Actor) -> bool:
        return bool(set(actor.roles) & set(task["roles"]))

    def inbox(self, actor: Actor) -> list[dict[str, Any]]:
        """The open tasks ``actor`` may decide, by due time."""
        return [t for t in self.api.view.list() if self.may_decide(t, actor)]

    def task(self, task_id: str) -> dict[str, Any] | None:
        """One task with its history (None: no task has this id)."""
        if len(task_id) > 512:
            return None
        found = self.api.view.get(task_id)
        if found is not None:
            found["history"] = self.api.view.history(task_id)
        return found

    def decide(
        self, task_id: str, actor: Actor, decision: str, digest: str, reason: str
    ) -> tuple[FlashLevel, str]:
        """Send ``actor``'s decision of the operation whose digest the page showed; the
        outcome as one line (refused: the task API's reason)."""
        if decision not in tuple(HumanDecision):
            return FlashLevel.REFUSED, "decision must be 'approve' or 'reject'"
        if not _HEX64.match(digest):
            return FlashLevel.REFUSED, "the page carried no operation digest; reload the task"
        if len(reason) > MAX_REASON_CHARS:
            return FlashLevel.REFUSED, f"the reason is longer than {MAX_REASON_CHARS} characters"
        task = self.api.view.get(task_id) if len(task_id) <= 512 else None
        if task is None:
            return FlashLevel.REFUSED, "no human task has this id"
        if not self.may_decide(task, actor):
            return FlashLevel.REFUSED, (
                f"actor '{actor.name}' holds none of the roles of task {task_id} "
                f"({', '.join(task['roles'])})"
            )
        token = self.api._token_for(task, actor)
        if token is None:
            return FlashLevel.REFUSED, (
                "this connector cannot issue the task's token (its KEEL_TASK_TOKEN_SECRET is "
                "not the orchestrator's)"
            )
        outcome = self.api.desk.decide(
            token, actor.name, list(actor.roles), decision, reason, digest
        )
        if outcome.status is DecisionStatus.PENDING:
            return FlashLevel.OK, f"{decision} sent; the orchestrator has not answered yet: reload"
        if outcome.refusal is not None or outcome.status is DecisionStatus.REPEATED:
            return (
                FlashLevel.REFUSED,
                f"refused: {outcome.reason} (reload the task to see it as it is now)",
            )
        return FlashLevel.OK, (
            f"{decision} of task {task_id} recorded by {actor.name} for operation {digest[:12]}…"
        )
