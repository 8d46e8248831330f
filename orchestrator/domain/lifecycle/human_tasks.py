"""Human tasks: a wait for a qualified person's decision on one exact operation.

Lifecycle (docs/human-tasks.md): when a state's :class:`HumanTask` wait begins, the
decider computes the owner, the evidence and the operation, records
``HumanTaskOpened`` (with the digests and the *hash* of the task token) and arms durable
timers for each reminder, each escalation and the expiry. A ``DecideHumanTask`` is
checked again at decision time — the task is open, not expired by the decision's
clock, the token hash matches (it is mandatory once the task recorded one), the actor
holds a qualifying role and, for an approval, the operation computed from the run's state
now has the digest the approver saw — and recorded as ``HumanTaskDecided`` with the
signed evidence (token hash, roles, proof: the runtime verified the proof, which needs a
key the domain never holds); the run then goes to ``on_approve`` or ``on_reject``.
A correction task (``HumanTask(correction=Model)``) records the model's JSON schema when it
opens; its approval must carry data valid against the model (refused with the validation
error otherwise), recorded in canonical form with the decision.
An expiry records ``HumanTaskExpired`` and rejects, cancels or enters the named state:
it never approves.

The task token comes from outside: the runtime gives the decider a function from task
id to the sha256 of the token it issues (e.g. the token is HMAC(secret, task id)), so
the domain never sees a secret and history never holds a token.

Like :mod:`orchestrator.domain.lifecycle.activities`, the deciding functions act on a
``Decision`` (implemented in :mod:`orchestrator.domain.lifecycle.command_handlers`); the
appliers at the end fold the events (registered by :mod:`orchestrator.domain.lifecycle.evolve`).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from orchestrator.domain.authoring.definitions import (
    HumanTask,
    State,
    WorkflowDefinition,
)
from orchestrator.domain.authoring.waits import correction_schema, operation_digest, sha256_hex
from orchestrator.domain.lifecycle.activities import (
    RunNeedsAttention,
    UserCodeFailed,
    check_computed,
)
from orchestrator.domain.model.errors import CommandRejected, format_validation_error, iso_utc
from orchestrator.domain.model.fingerprint import canonical_json
from orchestrator.domain.model.frozen_init import replace
from orchestrator.domain.model.limits import loads_bounded
from orchestrator.domain.model.messages import (
    DecideHumanTask,
    Envelope,
    HumanTaskDecided,
    HumanTaskEscalated,
    HumanTaskExpired,
    HumanTaskOpened,
    HumanTaskReminded,
    WorkflowCancelled,
    WorkflowFailed,
)
from orchestrator.domain.model.state import (
    HUMAN_TASKS_WINDOW,
    HumanTaskState,
    WorkflowState,
    remember_command,
)
from orchestrator.domain.model.vocabulary import (
    HumanDecision,
    HumanTaskStatus,
    HumanTimer,
    OnExpiry,
    PurposeKind,
    TimerPurpose,
)

__all__ = [
    "APPLIERS",
    "EXPIRED",
    "TaskTokenHash",
    "close_open_task",
    "on_decide",
    "on_timer",
    "open_task",
    "route",
    "task_id_for",
]

#: task id -> sha256 hex of the token the runtime issues for it (never the token).
TaskTokenHash = Callable[[str], str]
#: ``WaitState.outcome`` of a task that expired.
EXPIRED = "expired"

_S = HumanTaskStatus


class Decision(Protocol):
    """What a human task needs from the decision it runs in."""

    defn: WorkflowDefinition
    cmd: Envelope[Any]
    task_token_hash: TaskTokenHash | None

    @property
    def s(self) -> WorkflowState: ...

    def emit(self, payload: Any) -> None: ...

    def advance(self) -> None: ...

    def call(self, fn: Callable[..., Any], what: str) -> Any: ...

    def use(self, value: Any, convert: Callable[[Any], Any], problem: str) -> Any: ...

    def duration(self, value: Any, what: str) -> int: ...

    def arm_timer(self, purpose: TimerPurpose, timer_id: str, fire_at: int) -> None: ...


def task_id_for(workflow_id: str, run_id: str, state: str, visit: int) -> str:
    """A task's id: unique per workflow, run and state visit (the token's HMAC input)."""
    return f"{workflow_id}/{run_id}/{state}#{visit}"


def _task_def(d: Decision) -> tuple[State, HumanTask]:
    st = d.defn.states[d.s.current_state or ""]
    assert isinstance(st.wait, HumanTask)
    return st, st.wait


def _operation(value: Any) -> tuple[str, str]:
    if not isinstance(value, Mapping) or set(value) != {"resource", "arguments"}:
        raise ValueError('expected {"resource": <str>, "arguments": <JSON>}')
    resource = value["resource"]
    if not isinstance(resource, str) or not resource:
        raise ValueError("resource must be a non-empty string")
    return resource, sha256_hex(canonical_json(value["arguments"]))


def compute_operation(d: Decision, task: HumanTask) -> tuple[str, str, str]:
    """``(resource, arguments digest, operation digest)`` of the task's operation now."""
    what = f"operation of human task '{task.name}'"
    resource, args = d.use(d.call(task.operation, what), _operation, what)
    return (
        resource,
        args,
        operation_digest(resource, args, task.schema_version, task.policy_version),
    )


def open_task(d: Decision) -> None:
    """The human wait of the current state begins: record the task, arm its timers."""
    st, task = _task_def(d)
    s = d.s
    now = d.cmd.recorded_at
    task_id = task_id_for(s.workflow_id, s.run_id, st.name, s.visit)
    what = f"human task '{task.name}'"
    owner = task.owner
    if callable(owner):
        owner = d.use(d.call(owner, f"owner of {what}"), _name, f"owner of {what}")
    resource, args, digest = compute_operation(d, task)
    if task.evidence is None:
        evidence: Any = {"resource": resource, "arguments_digest": args}
    else:
        evidence = d.call(task.evidence, f"evidence of {what}")
    evidence_json = d.use(evidence, canonical_json, f"evidence of {what} is not JSON")
    check_computed(evidence_json, f"state '{st.name}': evidence of {what}")
    expires_at = now + d.duration(task.expires, f"expiry of {what}")
    due_at = now + d.duration(task.due, f"due time of {what}") if task.due is not None else 0
    hasher = d.task_token_hash
    schema_json = ""
    if task.correction is not None:
        schema_json = canonical_json(correction_schema(task.correction))
        check_computed(schema_json, f"state '{st.name}': correction schema of {what}")
    d.emit(
        HumanTaskOpened(
            task_id=task_id,
            task_name=task.name,
            owner=owner,
            role=task.role,
            evidence_json=evidence_json,
            evidence_digest=sha256_hex(evidence_json),
            resource=resource,
            arguments_digest=args,
            schema_version=task.schema_version,
            policy_version=task.policy_version,
            operation_digest=digest,
            due_at=due_at,
            expires_at=expires_at,
            token_hash="" if hasher is None else hasher(task_id),
            correction_schema_json=schema_json,
        )
    )
    base = s.visit_tag()
    schedule: list[tuple[HumanTimer, int, Any]]
    schedule = [(HumanTimer.REMIND, i, r) for i, r in enumerate(task.reminders, 1)]
    schedule += [(HumanTimer.ESCALATE, i, e.after) for i, e in enumerate(task.escalations, 1)]
    for kind, i, after in schedule:
        at = now + d.duration(after, f"{kind} {i} of {what}")
        if at < expires_at:
            purpose = TimerPurpose.human_timer(kind, i)
            d.arm_timer(purpose, purpose.timer_id(base), at)
    expiry = TimerPurpose.human_timer(HumanTimer.EXPIRE)
    d.arm_timer(expiry, expiry.timer_id(base), expires_at)


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a name (str), got {type(value).__name__}")
    return value


def on_timer(d: Decision, purpose: TimerPurpose) -> None:
    """A reminder, escalation or expiry timer of the open task fired (recorded)."""
    task = d.s.open_human_task()
    if task is None:  # cannot happen: the task's timers go when it closes
        return
    _, spec = _task_def(d)
    n = int(purpose.subject)
    if purpose.human is HumanTimer.REMIND:
        d.emit(HumanTaskReminded(task.task_id, n, task.owner))
    elif purpose.human is HumanTimer.ESCALATE:
        e = spec.escalations[n - 1]
        d.emit(HumanTaskEscalated(task.task_id, n, e.owner or task.owner, e.role or task.role))
    else:
        d.emit(HumanTaskExpired(task.task_id, str(spec.on_expiry)))
        d.advance()


def route(d: Decision, st: State, outcome: str) -> str | None:
    """Where a decided or expired task leads: a state, or None once the run ended."""
    assert isinstance(st.wait, HumanTask)
    task = st.wait
    if outcome == HumanDecision.APPROVE:
        return task.on_approve
    if outcome == EXPIRED:
        if task.on_expiry == OnExpiry.CANCEL:
            d.emit(WorkflowCancelled(f"human task '{task.name}' expired without a decision"))
            return None
        if task.on_expiry != OnExpiry.REJECT:
            return str(task.on_expiry)
        why = "expired without a decision"
    else:
        w = d.s.wait
        done = d.s.human_tasks.get(w.task_id or "") if w is not None else None
        why = f"was rejected by '{done.actor if done is not None else ''}'"
    if task.on_reject is not None:
        return task.on_reject
    d.emit(WorkflowFailed(f"state '{st.name}': human task '{task.name}' {why}"))
    return None


# -- decisions --------------------------------------------------------------------------


def _find(s: WorkflowState, p: DecideHumanTask, what: str) -> HumanTaskState:
    wid = s.workflow_id
    if p.task_id:
        task = s.human_tasks.get(p.task_id)
        if task is None:
            raise CommandRejected(
                f"workflow '{wid}' has no human task '{p.task_id}'; {what} refused"
            )
        if not (p.token_hash or task.token_hash):
            return task  # a task opened without tokens (a decider without task_token_hash)
        if not p.token_hash:
            raise CommandRejected(
                f"a decision of human task '{p.task_id}' carries the hash of its token; "
                f"{what} refused"
            )
        if not hmac.compare_digest(task.token_hash, p.token_hash):
            raise CommandRejected(
                f"the token does not match human task '{p.task_id}'; {what} refused"
            )
        return task
    if not p.token_hash:
        raise CommandRejected(f"a decision names a task id or a token; {what} refused")
    for task in s.human_tasks.values():
        if task.token_hash and hmac.compare_digest(task.token_hash, p.token_hash):
            return task
    raise CommandRejected(f"no human task of workflow '{wid}' has this token; {what} refused")


def _roles(p: DecideHumanTask, what: str) -> frozenset[str]:
    try:
        roles = json.loads(p.actor_roles_json or "[]")
    except ValueError:
        roles = None
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise CommandRejected(f"actor roles must be a JSON array of names; {what} refused")
    return frozenset(roles)


def on_decide(d: Decision, p: DecideHumanTask) -> None:
    """Check a decision again at decision time; record it and move the run on."""
    s = d.s
    if d.cmd.message_id in s.seen_commands:
        return
    what = f"{p.decision[:20]} of human task '{(p.task_id or 'by token')[:200]}'"
    if s.is_terminal:
        raise CommandRejected(f"workflow '{s.workflow_id}' is {s.status}; {what} refused")
    if p.decision not in tuple(HumanDecision):
        raise CommandRejected(
            f"a decision is 'approve' or 'reject', got '{p.decision[:100]}'; {what} refused"
        )
    if not p.actor:
        raise CommandRejected(f"a decision names its actor; {what} refused")
    task = _find(s, p, what)
    what = f"{p.decision} of human task '{task.task_id}' by '{p.actor[:200]}'"
    if not task.is_open:
        if task.decision == p.decision and task.actor == p.actor:
            return  # the same decision again: the first result stands, nothing is written
        if task.decision is not None:
            raise CommandRejected(
                f"human task '{task.task_id}' was already {task.status} by '{task.actor}' at "
                f"{iso_utc(task.decided_at or 0)}; {what} refused"
            )
        if task.status == _S.EXPIRED:
            raise CommandRejected(
                f"human task '{task.task_id}' expired at {iso_utc(task.expires_at)} "
                f"({task.expiry_outcome}); {what} refused"
            )
        raise CommandRejected(
            f"human task '{task.task_id}' closed undecided (the run left state "
            f"'{task.state}'); {what} refused"
        )
    now = d.cmd.recorded_at
    if now >= task.expires_at:
        raise CommandRejected(
            f"human task '{task.task_id}' expired at {iso_utc(task.expires_at)} (decision time "
            f"{iso_utc(now)}); {what} refused"
        )
    if not _roles(p, what) & set(task.roles):
        raise CommandRejected(
            f"actor '{p.actor[:200]}' holds none of the roles that may decide human task "
            f"'{task.task_id}' ({', '.join(task.roles)}); {what} refused"
        )
    digest = p.operation_digest or task.operation_digest
    correction = _correction(d, task, p, what)
    if p.decision == HumanDecision.APPROVE:
        digest = _approvable(d, task, p.operation_digest, what)
    d.emit(
        HumanTaskDecided(
            task_id=task.task_id,
            decision=p.decision,
            actor=p.actor,
            reason_digest=sha256_hex(p.reason),
            evidence_digest=task.evidence_digest,
            operation_digest=digest,
            decided_at=now,
            correction_json=correction,
            **_signed_evidence(p),
        )
    )
    d.advance()


def _signed_evidence(p: DecideHumanTask) -> dict[str, str]:
    """What a signed decision records so its proof can be recomputed from the event.

    The runtime verified the proof before deciding (the domain holds no key). An unsigned
    decision is a command recorded before v6, re-decided by replay, whose event holds the
    defaults; recording its token hash now would make replay differ from history.
    """
    if not p.proof:
        return {}
    return {
        "token_hash": p.token_hash,
        "actor_roles_json": p.actor_roles_json,
        "proof": p.proof,
        "correction_digest": sha256_hex(p.correction_json) if p.correction_json else "",
    }


def _correction(d: Decision, task: HumanTaskState, p: DecideHumanTask, what: str) -> str:
    """The correction to record: "" for a rejection or a plain task, else the approval's
    data validated against the task's model, in canonical JSON."""
    _, spec = _task_def(d)
    model: type[BaseModel] | None = spec.correction
    if model is None or p.decision != HumanDecision.APPROVE:
        if p.correction_json:
            kind = "a rejection" if model is not None else f"human task '{task.task_id}'"
            raise CommandRejected(f"{kind} carries no correction; {what} refused")
        return ""
    if not p.correction_json:
        raise CommandRejected(
            f"human task '{task.task_id}' is a correction task: an approval carries the "
            f"corrected data (JSON of {model.__name__}); {what} refused"
        )
    try:
        data = loads_bounded(p.correction_json, "the correction")
        value = model.model_validate(data)
    except ValidationError as exc:
        raise CommandRejected(
            f"the correction of human task '{task.task_id}' is not a valid {model.__name__}: "
            f"{format_validation_error(exc)}; {what} refused"
        ) from None
    except ValueError as exc:  # not JSON, or past a limit (LimitExceededError)
        raise CommandRejected(
            f"the correction of human task '{task.task_id}' is not JSON ({exc}); {what} refused"
        ) from None
    return canonical_json(value.model_dump(mode="json"))


def _approvable(d: Decision, task: HumanTaskState, seen: str, what: str) -> str:
    """The digest of the operation the run would perform now, if the approver saw it."""
    _, spec = _task_def(d)
    try:
        _, _, now_digest = compute_operation(d, spec)
    except (UserCodeFailed, RunNeedsAttention) as exc:
        raise CommandRejected(
            f"the operation cannot be computed now ({exc}); {what} refused"
        ) from None
    if now_digest != task.operation_digest:
        raise CommandRejected(
            f"the operation of human task '{task.task_id}' changed since it opened (digest "
            f"{task.operation_digest[:12]}… then, {now_digest[:12]}… now); {what} refused"
        )
    if not hmac.compare_digest(seen, now_digest):
        raise CommandRejected(
            f"stale approval: the approver saw operation {seen[:12] or '(none)'}…, the "
            f"workflow would run {now_digest[:12]}…; {what} refused"
        )
    return now_digest


# -- folding (registered in evolve.APPLIERS) -------------------------------------------------


def _put(n: WorkflowState, task: HumanTaskState) -> None:
    tasks = n.mut_human_tasks()
    tasks[task.task_id] = task
    if len(tasks) > HUMAN_TASKS_WINDOW:  # forget the oldest closed task
        oldest = next(t for t, v in tasks.items() if not v.is_open)
        del tasks[oldest]


def _drop_human_timers(n: WorkflowState) -> None:
    for tid, timer in list(n.timers.items()):
        if TimerPurpose.parse(timer.purpose).kind is PurposeKind.HUMAN:
            n.drop_timer(tid)


def close_open_task(n: WorkflowState) -> None:
    """The run leaves the state (or ends) with its task undecided: the task closes."""
    task = n.open_human_task()
    if task is not None:
        _put(n, replace(task, status=_S.CLOSED))


def _opened(lookup: Any, n: WorkflowState, p: HumanTaskOpened, env: Envelope[Any]) -> None:
    task = HumanTaskState(
        task_id=p.task_id,
        task_name=p.task_name,
        state=n.current_state or "",
        visit=n.visit,
        owner=p.owner,
        role=p.role,
        roles=(p.role,),
        evidence_digest=p.evidence_digest,
        operation_digest=p.operation_digest,
        token_hash=p.token_hash,
        opened_at=env.recorded_at,
        due_at=p.due_at,
        expires_at=p.expires_at,
    )
    _put(n, task)
    if n.wait is not None:
        n.wait = replace(n.wait, task_id=p.task_id)


def _reminded(lookup: Any, n: WorkflowState, p: HumanTaskReminded, env: Envelope[Any]) -> None:
    task = n.human_tasks[p.task_id]
    _put(n, replace(task, reminders=p.reminder))


def _escalated(lookup: Any, n: WorkflowState, p: HumanTaskEscalated, env: Envelope[Any]) -> None:
    task = n.human_tasks[p.task_id]
    roles = task.roles if p.role in task.roles else (*task.roles, p.role)
    _put(n, replace(task, level=p.level, owner=p.owner, role=p.role, roles=roles))


def _decided(lookup: Any, n: WorkflowState, p: HumanTaskDecided, env: Envelope[Any]) -> None:
    task = n.human_tasks[p.task_id]
    status = _S.APPROVED if p.decision == HumanDecision.APPROVE else _S.REJECTED
    _put(
        n,
        replace(
            task,
            status=status,
            decision=p.decision,
            actor=p.actor,
            decided_at=p.decided_at,
            correction_json=p.correction_json,
        ),
    )
    _end_wait(n, p.decision)
    if env.causation_id is not None:
        n.seen_commands = remember_command(n.seen_commands, env.causation_id)


def _expired(lookup: Any, n: WorkflowState, p: HumanTaskExpired, env: Envelope[Any]) -> None:
    task = n.human_tasks[p.task_id]
    _put(n, replace(task, status=_S.EXPIRED, expiry_outcome=p.outcome))
    _end_wait(n, EXPIRED)


def _end_wait(n: WorkflowState, outcome: str) -> None:
    _drop_human_timers(n)
    if n.wait is not None:
        n.wait = replace(n.wait, satisfied=True, outcome=outcome)


APPLIERS: dict[type, Callable[[Any, WorkflowState, Any, Envelope[Any]], None]] = {
    HumanTaskOpened: _opened,
    HumanTaskReminded: _reminded,
    HumanTaskEscalated: _escalated,
    HumanTaskDecided: _decided,
    HumanTaskExpired: _expired,
}
