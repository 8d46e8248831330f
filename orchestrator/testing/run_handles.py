"""A run in the test environment: what a test sends it, and what it reads back.

A :class:`RunHandle` is the test's client of one workflow id: signals, cancels, human-task
decisions (made as a person makes them: with the task's token, the actor's roles and the
digest of the operation they were shown, signed like the connector signs them), and the
reads: status, typed history, open tasks, and :meth:`RunHandle.result`, which waits the
way Temporal's time-skipping environment does: whenever the environment is idle and the
run has not ended, the clock jumps to the next armed timer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from orchestrator.client.history_io import write_history
from orchestrator.client.human_task_decisions import attempt_id, decision_request
from orchestrator.client.json_args import payload_json
from orchestrator.client.query_answers import without_ciphertext
from orchestrator.domain.authoring.queries import run_query
from orchestrator.domain.authoring.waits import token_hash
from orchestrator.domain.model.errors import CommandRejected, NotFoundError
from orchestrator.domain.model.messages import (
    CancelWorkflow,
    Envelope,
    HumanTaskOpened,
    SignalWorkflow,
    TerminateWorkflow,
)
from orchestrator.domain.model.refusal_messages import CommandRefused
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import HumanDecision, HumanTaskStatus, WorkflowStatus
from orchestrator.testing.kit_errors import RunBlockedError, WorkflowFailedError
from orchestrator.trust.sealing import mask

if TYPE_CHECKING:
    from pathlib import Path

    from orchestrator.application.app import KeelApp
    from orchestrator.records.clock import Clock
    from orchestrator.trust.decision_proofs import DecisionProofs
    from orchestrator.trust.human_task_tokens import TaskTokens

__all__ = ["HumanTaskView", "RunDriver", "RunHandle", "TaskDecision"]

P = TypeVar("P")

#: How long :meth:`RunHandle.result` lets time pass by default: longer than any test's timer.
DEFAULT_RESULT_LIMIT = timedelta(days=3660)


def _is(env: Envelope[Any], kind: type | str) -> bool:
    return env.type == kind if isinstance(kind, str) else isinstance(env.payload, kind)


def _at(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


class RunDriver(Protocol):
    """What a handle asks of its environment (``WorkflowEnvironment``): commands in, the
    engine stepped, state and events out."""

    @property
    def app(self) -> KeelApp: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def tokens(self) -> TaskTokens: ...

    @property
    def proofs(self) -> DecisionProofs: ...

    def send(self, workflow_id: str, payload: Any, message_id: str | None = None) -> str: ...

    def run_until_idle(self) -> None: ...

    def skip_to_next_timer(self, limit_ms: int | None = None) -> bool: ...

    def state(self, workflow_id: str) -> WorkflowState | None: ...

    def events(self, workflow_id: str | None = None) -> list[Envelope[Any]]: ...


@dataclass(frozen=True)
class HumanTaskView:
    """An open human task as its approver sees it in the inbox: what to decide
    (``evidence``, the ``operation_digest`` of the exact operation), who may
    (``roles``), by when, and the task's ``token``."""

    task_id: str
    name: str
    owner: str
    role: str
    roles: tuple[str, ...]
    evidence: Any
    operation_digest: str
    due_at: datetime | None
    expires_at: datetime | None
    token: str


@dataclass(frozen=True)
class TaskDecision:
    """What the engine made of a decision: recorded, or refused with its reason."""

    decided: bool
    reason: str = ""
    message_id: str = ""


class RunHandle:
    """One workflow id in a :class:`WorkflowEnvironment` (every run of it)."""

    def __init__(self, env: RunDriver, workflow_id: str) -> None:
        self.env = env
        self.workflow_id = workflow_id

    def __repr__(self) -> str:
        state = self.env.state(self.workflow_id)
        return f"RunHandle({self.workflow_id!r}, {state.status if state else 'not started'})"

    # ------------------------------------------------------------------ reads
    def state(self) -> WorkflowState:
        """The run's state as the engine holds it; ``NotFoundError`` before it starts."""
        found = self.env.state(self.workflow_id)
        if found is None:
            raise NotFoundError(f"workflow '{self.workflow_id}' does not exist")
        return found

    @property
    def status(self) -> WorkflowStatus:
        return WorkflowStatus(self.state().status)

    def history(self) -> list[Envelope[Any]]:
        """Every recorded event of the workflow (typed envelopes: ``.payload`` is the event,
        ``.recorded_at`` the environment's time of the decision), in order."""
        return self.env.events(self.workflow_id)

    def events(self, kind: type[P] | str) -> list[P]:
        """The payloads of the recorded events of type ``kind``: the class, or its name
        (``"HumanTaskExpired"``, docs/event-log.md)."""
        return [e.payload for e in self.history() if _is(e, kind)]

    def recorded_at(self, kind: type | str) -> list[datetime]:
        """When each event of type ``kind`` was recorded (the environment's clock)."""
        return [
            datetime.fromtimestamp(e.recorded_at / 1000, UTC)
            for e in self.history()
            if _is(e, kind)
        ]

    def query(self, name: str, args: Any = None) -> Any:
        """Answer the run's query ``name`` (with ``args``: a JSON value or a model) over the
        state the engine holds, as ``KeelClient.query`` answers it from the read model;
        sealed values show as ``***``."""
        state = self.state()
        definition = self.env.app.get(state.name, state.version)
        return mask(run_query(definition, without_ciphertext(state), name, args))

    def export(self, path: Path) -> int:
        """Write the history as ``keel workflow export`` does (JSON lines), for
        :func:`~orchestrator.testing.replay` or ``keel replay-check``; the event count."""
        with open(path, "w", encoding="utf-8") as out:
            return write_history(self.history(), out)

    def result(self, *, limit: timedelta = DEFAULT_RESULT_LIMIT, skip_time: bool = True) -> Any:
        """The run's output (JSON value) once it completed, letting time pass as needed.

        Each time the environment is idle and the run has not ended, the clock jumps to
        the next armed timer (not past ``limit`` from now; never, without ``skip_time``).
        Raises :class:`WorkflowFailedError` when the run ended otherwise (failed,
        cancelled, compensated...), :class:`RunBlockedError` when nothing can end it: it
        needs an operator, or waits for a signal, a webhook or a person with no timer left.
        """
        until = self.env.clock.now_ms() + int(limit.total_seconds() * 1000)
        self.env.run_until_idle()
        while True:
            state = self.state()
            if state.is_terminal:
                break
            if state.status == WorkflowStatus.NEEDS_ATTENTION:
                raise RunBlockedError(
                    f"workflow '{self.workflow_id}' needs attention: {state.attention_reason or ''}"
                    f"{self._attention_detail()}"
                )
            if not skip_time or not self.env.skip_to_next_timer(until):
                raise RunBlockedError(
                    f"workflow '{self.workflow_id}' is {state.status} and nothing in the "
                    f"environment will move it{self._waiting_for(state)}: send what it waits "
                    "for, or let time pass (env.sleep)"
                )
        if state.status != WorkflowStatus.COMPLETED:
            reason = state.failure_reason or state.cancel_reason or ""
            raise WorkflowFailedError(self.workflow_id, str(state.status), reason)
        return None if state.output_json is None else json.loads(state.output_json)

    def _waiting_for(self, state: WorkflowState) -> str:
        wait = state.wait
        if wait is None:
            return ""
        opened = [t.task_name for t in state.human_tasks.values() if t.status == "open"]
        if opened:
            return f" (it waits for a decision of human task {', '.join(opened)})"
        return f" (it waits in state '{state.current_state}')"

    def _attention_detail(self) -> str:
        from orchestrator.domain.model.messages import WorkflowNeedsAttention

        notes = self.events(WorkflowNeedsAttention)
        return f" ({notes[-1].reason})" if notes else ""

    # ------------------------------------------------------------------ commands
    def _require_running(self, what: str) -> WorkflowState:
        state = self.state()
        if state.is_terminal:
            raise CommandRejected(
                f"workflow '{self.workflow_id}' is {state.status}; {what} refused"
            )
        return state

    def signal(self, name: str, payload: Any = None) -> None:
        """Send signal ``name`` with ``payload`` (a JSON value), then run to idle."""
        text = payload_json(payload, f"payload of signal '{name}'")
        state = self._require_running(f"signal '{name}'")
        definition = self.env.app.get(state.name, state.version)
        if name not in definition.signal_names:
            known = ", ".join(sorted(definition.signal_names)) or "none"
            raise CommandRejected(f"{definition.label} has no signal '{name}' (known: {known})")
        self.env.send(self.workflow_id, SignalWorkflow(name, text))
        self.env.run_until_idle()

    def cancel(self, reason: str = "cancelled by the test") -> None:
        self._require_running("cancel")
        self.env.send(self.workflow_id, CancelWorkflow(reason))
        self.env.run_until_idle()

    def terminate(self, reason: str = "terminated by the test") -> None:
        self._require_running("terminate")
        self.env.send(self.workflow_id, TerminateWorkflow(reason))
        self.env.run_until_idle()

    # ------------------------------------------------------------------ human tasks
    def human_tasks(self) -> list[HumanTaskView]:
        """The run's open human tasks, as their approvers see them."""
        opened = {e.task_id: e for e in self.events(HumanTaskOpened)}
        views = []
        for task in self.state().human_tasks.values():
            if task.status != HumanTaskStatus.OPEN or task.task_id not in opened:
                continue
            rec = opened[task.task_id]
            views.append(
                HumanTaskView(
                    task_id=task.task_id,
                    name=task.task_name,
                    owner=task.owner,
                    role=task.role,
                    roles=tuple(task.roles),
                    evidence=json.loads(rec.evidence_json) if rec.evidence_json else None,
                    operation_digest=task.operation_digest,
                    due_at=_at(task.due_at),
                    expires_at=_at(task.expires_at),
                    token=self.env.tokens.issue(task.task_id),
                )
            )
        return views

    def human_task(self, name: str | None = None) -> HumanTaskView:
        """The one open human task (named ``name``); ``NotFoundError`` when there is none."""
        found = [t for t in self.human_tasks() if name is None or t.name == name]
        if len(found) != 1:
            what = f"human task '{name}'" if name else "human task"
            raise NotFoundError(
                f"workflow '{self.workflow_id}' has {len(found)} open {what}(s), not one"
            )
        return found[0]

    def decide(
        self,
        task: HumanTaskView,
        decision: HumanDecision | str,
        *,
        actor: str,
        roles: tuple[str, ...] | list[str] | None = None,
        operation_digest: str | None = None,
        reason: str = "",
        correction: Any = None,
    ) -> TaskDecision:
        """Decide ``task`` as ``actor`` holding ``roles`` (default: the task's role) who saw
        ``operation_digest`` (default: the task's, as the inbox shows it): the decision is
        checked again by the engine (qualification, token, expiry, digest), then runs to
        idle. A refusal is returned with the engine's reason, not raised; the same request
        again is answered with it, unless its reason may pass later (the operation's code
        failed): then it is sent again, as the client does (``attempt_id``)."""
        seen = task.operation_digest if operation_digest is None else operation_digest
        mid, command = decision_request(
            task.task_id,
            token_hash(task.token),
            decision,
            actor,
            roles if roles is not None else [task.role],
            seen,
            reason,
            correction,
        )
        refused = {r.command_id: r.reason for r in self.events(CommandRefused)}
        mid, recorded = attempt_id(mid, refused)
        if recorded is not None:  # this very request was refused before: the same answer
            return TaskDecision(False, recorded, mid)
        self.env.send(self.workflow_id, self.env.proofs.sign(self.workflow_id, command), mid)
        self.env.run_until_idle()
        for refusal in self.events(CommandRefused):
            if refusal.command_id == mid:
                return TaskDecision(False, refusal.reason, mid)
        return TaskDecision(True, "", mid)

    def approve(self, task: HumanTaskView, *, actor: str, **options: Any) -> TaskDecision:
        """:meth:`decide` with ``approve``."""
        return self.decide(task, HumanDecision.APPROVE, actor=actor, **options)

    def reject(self, task: HumanTaskView, *, actor: str, **options: Any) -> TaskDecision:
        """:meth:`decide` with ``reject``."""
        return self.decide(task, HumanDecision.REJECT, actor=actor, **options)
