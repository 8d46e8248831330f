"""Deciding a human task from outside: send ``DecideHumanTask``, learn what the orchestrator
decided (docs/human-tasks.md, "Deciding").

The orchestrator is the authority: it checks the decision again at decision time and
either records ``HumanTaskDecided`` or refuses the command, which the run records in its
history (``CommandRefused``, with a one-line reason; no dead letter). The sender
authenticated the actor, so it signs the decision (orchestrator/trust/decision_proofs.py):
the orchestrator refuses one whose proof does not verify. So the sender, after Kafka
acknowledged the command, watches until one answers:

* the inbox record of the task (:mod:`orchestrator.io.redis.human_task_inbox`), which the
  projector updates from ``HumanTaskDecided``: this actor's decision there → decided;
* ``keel.events`` from the offsets it had *before* sending, for the ``CommandRefused``
  whose causation id is the command's message id → refused, with the orchestrator's
  reason (and ``keel.dlq`` likewise, for a command that could not be processed at all).

A finished run records nothing more, so a decision of a task whose run has ended is
answered from the inbox record before anything is sent (the run's status is read with it);
and a run records a refusal once, so a repeated refused request is answered from the read
model's history (the ``CommandRefused`` naming its message id) and not sent again, unless
its reason may pass without the request changing (:func:`may_pass_later`): then the same
words are the request's next attempt, under the next message id (:func:`attempt_id`).

A correction task's approval carries the corrected data (``correction``, any JSON value):
it is sent as ``correction_json`` and the orchestrator validates it against the task's
model (docs/human-tasks.md, "Correction tasks").

The message id is a function of (task, actor, decision, digest seen, reason, correction,
roles), so a retried request is ignored by the orchestrator even after the run finished.
A decision the inbox already shows for the same actor is answered with that first result
and nothing is sent.
A refusal's kind is read from the orchestrator's reason (:func:`refusal_of`); the connector
answers each kind with its HTTP status.
Only an unknown token is answered without the orchestrator: with no task, there is no
workflow to send the command to.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.client.awaiting import send_and_await
from orchestrator.config.settings import Settings
from orchestrator.domain.authoring.waits import token_hash
from orchestrator.domain.model.fingerprint import canonical_json
from orchestrator.domain.model.messages import CommandRefused, DeadLetter, DecideHumanTask
from orchestrator.domain.model.vocabulary import HumanDecision, WorkflowStatus
from orchestrator.io.kafka.clients import EndTail
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.trust.decision_proofs import DecisionProofs, load_decision_proofs

__all__ = [
    "DecisionOutcome",
    "DecisionStatus",
    "Refusal",
    "RefusalWatch",
    "TaskDesk",
    "attempt_id",
    "decision_message_id",
    "decision_request",
    "may_pass_later",
    "refusal_of",
]

#: How long a decision waits for the orchestrator's answer before "pending" (202).
DEFAULT_WAIT_S = 15.0
#: How the orchestrator's dead letter of a refused command began (before refusals were
#: recorded in the run's history).
REJECTED = "rejected: "
#: History lines of the read model searched for an earlier refusal of the same request.
REFUSAL_LOOKBACK = 500
#: A reason longer than this is refused before anything is sent.
MAX_REASON_CHARS = 2000


class DecisionStatus(StrEnum):
    """The ``status`` of a decision's answer."""

    DECIDED = "decided"  # recorded now
    REPEATED = "repeated"  # the same decision was recorded before: the first result
    REFUSED = "refused"  # the orchestrator refused it (reason)
    PENDING = "pending"  # sent; no answer within the wait (retry the same request)
    UNKNOWN = "unknown"  # no task has this token


class Refusal(StrEnum):
    """Why a decision was not taken, in the client's words (the connector answers each
    with its HTTP status: ``connectors/human_task_api.py``; the CLI names it)."""

    FORBIDDEN = "forbidden"  # the actor may not decide it, or the proof is not ours
    NOT_FOUND = "not found"  # no task has this token
    GONE = "gone"  # the task expired or closed undecided
    CONFLICT = "conflict"  # decided already, or the operation changed
    INVALID = "invalid"  # the request itself is malformed
    INVALID_CORRECTION = "invalid correction"  # a correction the task's model refuses
    UNAVAILABLE = "unavailable"  # the orchestrator cannot decide tasks (no key)


@dataclass
class DecisionOutcome:
    """The answer to one decision: its ``status``, and for a refusal its kind and reason."""

    status: DecisionStatus
    refusal: Refusal | None = None
    reason: str | None = None
    task: dict[str, Any] | None = None
    message_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": str(self.status)}
        if self.reason is not None:
            out["error" if self.refusal is not None else "reason"] = self.reason
        if self.task is not None:
            t = self.task
            out["task_id"] = t["task_id"]
            out["workflow_id"] = t["workflow_id"]
            out["decision"] = {
                "decision": t["decision"],
                "actor": t["actor"],
                "decided_at": t["decided_at"],
                "operation_digest": t["operation_digest"],
            }
            out["task_status"] = t["status"]
        if self.message_id is not None:
            out["message_id"] = self.message_id
        out.update(self.extra)
        return out


def decision_message_id(
    task_id: str,
    actor: str,
    decision: str,
    operation_digest: str,
    reason: str,
    correction_json: str = "",
    roles_json: str = "",
) -> str:
    """The command's message id: the same request always has the same id.

    ``roles_json`` (the actor's roles as the sender vouches for them, sorted JSON) is
    part of the request: an actor refused for want of a role and granted it since sends
    the same words as a new request, not the refused one again (whose first refusal
    would be its answer)."""
    text = f"{operation_digest}\0{reason}" + (f"\0{correction_json}" if correction_json else "")
    if roles_json:
        text += f"\0roles\0{roles_json}"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    mid = f"decide/{task_id}/{actor}/{decision}/{digest}"
    if len(mid) > 400:
        whole = hashlib.sha256(f"{task_id}\0{actor}\0{decision}".encode()).hexdigest()
        mid = f"decide/{whole}/{digest}"
    return mid


def decision_request(
    task_id: str,
    token_hash_hex: str,
    decision: str,
    actor: str,
    roles: list[str] | tuple[str, ...],
    operation_digest: str,
    reason: str,
    correction: Any = None,
) -> tuple[str, DecideHumanTask]:
    """One decision as it is sent (unsigned), and its message id: the one place a sender
    (the client, the test kit) turns a person's decision into a command."""
    decided = str(HumanDecision(decision))
    correction_json = "" if correction is None else canonical_json(correction)
    roles_json = json.dumps(sorted(roles))
    mid = decision_message_id(
        task_id, actor, decided, operation_digest, reason, correction_json, roles_json
    )
    return mid, DecideHumanTask(
        task_id=task_id,
        token_hash=token_hash_hex,
        decision=decided,
        actor=actor,
        actor_roles_json=roles_json,
        reason=reason,
        operation_digest=operation_digest,
        correction_json=correction_json,
    )


#: Refusal reasons of docs/human-tasks.md ("Deciding") and the kind of each.
_REFUSALS: tuple[tuple[str, Refusal], ...] = (
    ("holds none of the roles", Refusal.FORBIDDEN),
    ("has this token", Refusal.NOT_FOUND),
    ("the token does not match", Refusal.NOT_FOUND),
    ("has no human task", Refusal.NOT_FOUND),
    ("expired at", Refusal.GONE),
    ("closed undecided", Refusal.GONE),
    ("was already", Refusal.CONFLICT),
    ("stale approval", Refusal.CONFLICT),
    ("changed since it opened", Refusal.CONFLICT),
    ("cannot be computed now", Refusal.UNAVAILABLE),  # the operation's code failed
    ("the decision's proof", Refusal.FORBIDDEN),  # forged, or another deployment's key
    ("carries no proof", Refusal.FORBIDDEN),
    ("carries the hash of its token", Refusal.INVALID),
    ("holds no task-token key", Refusal.UNAVAILABLE),
    ("actor roles must be", Refusal.INVALID),
    ("a decision is 'approve' or 'reject'", Refusal.INVALID),
    ("a decision names", Refusal.INVALID),
    ("is not a valid", Refusal.INVALID_CORRECTION),  # fails the task's model
    ("the correction of human task", Refusal.INVALID),  # not JSON
    ("carries the corrected data", Refusal.INVALID),
    ("carries no correction", Refusal.INVALID),
)


#: Refusals that say nothing of the request, only of the run or the orchestrator at the
#: time (the operation's code failed or needs an operator; no key to verify decisions).
_MAY_PASS_LATER = ("cannot be computed now", "holds no task-token key")


def may_pass_later(reason: str) -> bool:
    """Whether the same request may be decided once something outside it is mended."""
    return any(needle in reason for needle in _MAY_PASS_LATER)


def attempt_id(mid: str, refusals: Mapping[str, str]) -> tuple[str, str | None]:
    """The message id to send request ``mid`` under, and the refusal that answers it
    instead (None: send it). ``refusals`` maps each refused command's message id to the
    reason (what the run recorded). A request refused for a reason that may pass later is
    sent again as its next attempt (``mid``, ``mid/again/1``, ...): still one id per
    attempt, so a retried attempt is deduplicated like any command."""
    attempt, tries = mid, 0
    while True:
        reason = refusals.get(attempt)
        if reason is None or not may_pass_later(reason):
            return attempt, reason
        tries += 1
        attempt = f"{mid}/again/{tries}"


def refusal_of(reason: str, task: dict[str, Any] | None = None) -> Refusal:
    """The kind of the orchestrator's refusal ``reason``.

    A refusal because the run already ended says nothing of the task: the task's record
    does (decided by someone: a conflict; else gone).
    """
    for needle, kind in _REFUSALS:
        if needle in reason:
            return kind
    if " is completed;" in reason or " is failed;" in reason or " is cancelled;" in reason:
        return Refusal.CONFLICT if task is not None and task.get("decision") else Refusal.GONE
    return Refusal.CONFLICT


def _run_ended(task: dict[str, Any], decision: str) -> str | None:
    """The orchestrator's reason for refusing ``decision`` of ``task`` when its run has
    finished (the words of ``orchestrator/domain/lifecycle/human_tasks.py``), or None."""
    status = task.get("run_status")
    try:
        ended = status is not None and WorkflowStatus(status).is_terminal
    except ValueError:
        return None
    if not ended:
        return None
    what = f"{decision[:20]} of human task '{task['task_id'][:200]}'"
    return f"workflow '{task['workflow_id']}' is {status}; {what} refused"


class RefusalWatch:
    """The orchestrator's refusals of commands sent from now on: ``CommandRefused`` events
    in ``keel.events`` (a live run's refusal) and letters in ``keel.dlq`` (a command that
    could not be processed at all), both read from the ends they had when this was made.
    ``letters`` maps a command's message id (the causation id) to the reason."""

    def __init__(self, settings: Settings, codec: Codec | None = None) -> None:
        self.codec = codec or codec_for(settings)
        group = f"{settings.topic_prefix}.decisions"
        extra = {"fetch.wait.max.ms": 50}
        self.tails = [
            EndTail(settings, settings.topic("events"), group, **extra),
            EndTail(settings, settings.topic("dlq"), group, **extra),
        ]
        self.letters: dict[str, str] = {}  # causation id -> reason

    def poll(self, timeout_s: float) -> None:
        for i, tail in enumerate(self.tails):
            for msg in tail.poll(timeout_s if i == 0 else 0):
                self._take(msg)

    def _take(self, msg: Any) -> None:
        value = msg.value()
        if value is None:
            return
        try:
            env = self.codec.decode(value)
        except Exception:  # not a record Keel can read: not ours
            return
        if not env.causation_id:
            return
        p = env.payload
        if isinstance(p, CommandRefused):
            self.letters[env.causation_id] = p.reason
        elif isinstance(p, DeadLetter):  # a letter of "rejected: <reason>" (before 0.3)
            self.letters[env.causation_id] = p.reason.removeprefix(REJECTED)

    def close(self) -> None:
        for tail in self.tails:
            tail.close()


class TaskDesk:
    """Decides tasks for an authenticated actor: ``keel human-tasks decide`` and the connector.

    ``send(workflow_id, payload, message_id)`` publishes one command and returns once Kafka
    acknowledged it (:meth:`orchestrator.client.client.KeelClient.send_as`); ``tasks`` is
    a :class:`~orchestrator.io.redis.human_task_inbox.TasksView`. Each decision is signed
    with ``proofs`` (default: the deployment's key from ``settings``, loaded on first use),
    since the orchestrator refuses an unsigned one.
    """

    def __init__(
        self,
        settings: Settings,
        tasks: Any,
        send: Callable[[str, Any, str], Any],
        *,
        wait_s: float = DEFAULT_WAIT_S,
        watch: Callable[[], RefusalWatch] | None = None,
        proofs: DecisionProofs | None = None,
        codec: Codec | None = None,
    ) -> None:
        self.settings = settings
        self.tasks = tasks
        self.send = send
        self.wait_s = wait_s
        self._watch = watch or (lambda: RefusalWatch(settings, codec))
        self._proofs = proofs

    @property
    def proofs(self) -> DecisionProofs:
        """The signer (``ConfigError`` when this process has no task-token key)."""
        if self._proofs is None:
            self._proofs = load_decision_proofs(self.settings)
        return self._proofs

    def find(self, token: str) -> dict[str, Any] | None:
        """The task a token belongs to (by its sha256), or None."""
        return self.tasks.by_token_hash(token_hash(token)) if token else None

    def decide(
        self,
        token: str,
        actor: str,
        roles: list[str],
        decision: str,
        reason: str = "",
        operation_digest: str | None = None,
        correction: Any = None,
    ) -> DecisionOutcome:
        """Send one decision and wait for what the orchestrator made of it.

        ``correction``: the corrected data of a correction task's approval (None: none).
        """
        th = token_hash(token)
        task = self.tasks.by_token_hash(th) if token else None
        if task is None:
            return DecisionOutcome(
                DecisionStatus.UNKNOWN, Refusal.NOT_FOUND, "no human task has this token"
            )
        if task["decision"] == decision and task["actor"] == actor:
            return DecisionOutcome(
                DecisionStatus.REPEATED,
                None,
                f"'{actor}' already decided {decision} on this task; the first result stands",
                task,
            )
        ended = _run_ended(task, decision)
        if ended is not None:  # a finished run records nothing: its answer is known here
            return DecisionOutcome(DecisionStatus.REFUSED, refusal_of(ended, task), ended, task)
        seen = task["operation_digest"] if operation_digest is None else operation_digest
        mid, payload = decision_request(
            task["task_id"], th, decision, actor, roles, seen, reason, correction
        )
        mid, recorded = attempt_id(mid, self._recorded_refusals(task["workflow_id"], mid))
        if recorded is not None:  # this very request was refused before: the same answer
            return DecisionOutcome(
                DecisionStatus.REFUSED, refusal_of(recorded, task), recorded, task, mid
            )
        payload = self.proofs.sign(task["workflow_id"], payload)
        watch = self._watch()  # its ends are read before the command goes out
        try:
            _, outcome = send_and_await(
                lambda: self.send(task["workflow_id"], payload, mid),
                lambda _: self._answer(task["task_id"], actor, decision, mid, watch),
                lambda left: watch.poll(min(left, 0.1)),
                self.wait_s,
            )
        finally:
            watch.close()
        if outcome is not None:
            return outcome
        return DecisionOutcome(
            DecisionStatus.PENDING,
            None,
            f"sent; the orchestrator did not answer within {self.wait_s:g}s; "
            "repeat the same request to learn the outcome",
            self.tasks.get(task["task_id"]),
            mid,
        )

    def _recorded_refusals(self, workflow_id: str, mid: str) -> dict[str, str]:
        """The reasons of the run's ``CommandRefused`` of request ``mid`` and its attempts,
        by message id, from the read model's history (its last ``REFUSAL_LOOKBACK``
        lines): a repeated refused request writes nothing, so its answer is read there."""
        r, ks = getattr(self.tasks, "r", None), getattr(self.tasks, "ks", None)
        if r is None or ks is None:
            return {}
        found: dict[str, str] = {}
        for line in r.lrange(ks.history(workflow_id), -REFUSAL_LOOKBACK, -1):
            entry = json.loads(line)
            data = entry.get("data") or {}
            command_id = str(data.get("command_id", ""))
            ours = command_id == mid or command_id.startswith(f"{mid}/again/")
            if entry.get("type") == "CommandRefused" and ours:
                found.setdefault(command_id, str(data.get("reason", "")))
        return found

    def _answer(
        self, task_id: str, actor: str, decision: str, mid: str, watch: RefusalWatch
    ) -> DecisionOutcome | None:
        """The orchestrator's answer to command ``mid`` so far: this actor's decision in the
        inbox, or its refusal; None while there is neither."""
        task = self.tasks.get(task_id)
        if task is not None and task["decision"] == decision and task["actor"] == actor:
            return DecisionOutcome(DecisionStatus.DECIDED, None, None, task, mid)
        if mid in watch.letters:
            reason = watch.letters[mid]
            return DecisionOutcome(
                DecisionStatus.REFUSED, refusal_of(reason, task), reason, task, mid
            )
        return None
