"""The human-task inbox: a Redis projection of ``HumanTask*`` events (docs/human-tasks.md).

Like the workflow read model (:mod:`orchestrator.io.redis.read_model`) it is rebuilt from
``keel.events`` by ``keel projections rebuild`` and written by the projector in the same
Redis transaction as the workflow's row, so it is exactly as current and as idempotent.
Every key lives in the read-model space (``keel:<prefix>:rm:``), variable part last:

=====================================  =================================================
``rm:task:<task id>``                  hash: the task (owner, roles, level, due and
                                       expiry times, evidence, operation digest, status,
                                       decision, actor, token hash)
``rm:taskhist:<task id>``              list: the task's events (history lines)
``rm:tasktoken:<token hash>``          the task id of a token's sha256 (never the token)
``rm:tasks:open``                      zset: open task ids by due time (else expiry)
``rm:tasks:all``                       zset: every task id by opening time
=====================================  =================================================

A task opens on ``HumanTaskOpened``, changes on ``HumanTaskReminded`` and
``HumanTaskEscalated``, and closes on ``HumanTaskDecided``, ``HumanTaskExpired``, the
run's next ``StateEntered``, its compensation, its end or its continuation: the task's
status is read from the folded :class:`~orchestrator.domain.model.state.WorkflowState`, so the
inbox can never disagree with what the orchestrator decides.

Like every read model it is a pure function of the events, whatever batches the projector
folded them in (``tests/integration/test_rebuild_equality.py``): a row is written only
with the event that changed its task, ``updated_at`` is that event's time, and the run's
status is not copied into the row (it would go stale as the run moves on) but read from
the run's own row when the inbox is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.model.messages import (
    CompensationStarted,
    Envelope,
    HumanTaskDecided,
    HumanTaskEscalated,
    HumanTaskExpired,
    HumanTaskOpened,
    HumanTaskReminded,
    StateEntered,
    WorkflowContinuedAsNew,
)
from orchestrator.domain.model.state import HumanTaskState, WorkflowState
from orchestrator.domain.model.vocabulary import HumanTaskStatus
from orchestrator.io.redis.client_factory import is_cluster
from orchestrator.io.redis.keyspace import Keyspace

__all__ = ["TaskKeys", "TaskWrites", "TasksView", "task_writes"]

TASK_EVENTS = (
    HumanTaskOpened,
    HumanTaskReminded,
    HumanTaskEscalated,
    HumanTaskDecided,
    HumanTaskExpired,
)
#: Events that close the task the run waits on (the run leaves its state), besides the
#: terminal ones (``TERMINAL``).
CLOSING_EVENTS = (StateEntered, WorkflowContinuedAsNew, CompensationStarted)
#: Task events after which the task is no longer open.
ENDING_TASK_EVENTS = (HumanTaskDecided, HumanTaskExpired)
#: The most tasks one inbox listing reads.
MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class TaskKeys:
    """The inbox's keys, all under the read model's prefix (cleared by a rebuild)."""

    ks: Keyspace

    def task(self, task_id: str) -> str:
        return f"{self.ks.read_model}task:{task_id}"

    def history(self, task_id: str) -> str:
        return f"{self.ks.read_model}taskhist:{task_id}"

    def token(self, token_hash: str) -> str:
        return f"{self.ks.read_model}tasktoken:{token_hash}"

    @property
    def open(self) -> str:
        return f"{self.ks.read_model}tasks:open"

    @property
    def all(self) -> str:
        return f"{self.ks.read_model}tasks:all"


def _fields(task: HumanTaskState, at: int) -> dict[str, Any]:
    """What changes over a task's life, from the folded state; ``at``: the time of the
    event that changed it last."""
    return {
        "status": str(task.status),
        "owner": task.owner,
        "role": task.role,
        "roles_json": json.dumps(list(task.roles)),
        "level": task.level,
        "reminders": task.reminders,
        "decision": task.decision or "",
        "actor": task.actor or "",
        "decided_at": task.decided_at if task.decided_at is not None else "",
        "expiry_outcome": task.expiry_outcome or "",
        "correction_json": task.correction_json,
        "updated_at": at,
    }


def _opened(p: HumanTaskOpened, env: Envelope[Any]) -> dict[str, Any]:
    """What a task is given when it opens and keeps."""
    return {
        "task_id": p.task_id,
        "task_name": p.task_name,
        "workflow_id": env.workflow_id,
        "run_id": env.run_id,
        "evidence_json": p.evidence_json,
        "evidence_digest": p.evidence_digest,
        "resource": p.resource,
        "arguments_digest": p.arguments_digest,
        "schema_version": p.schema_version,
        "policy_version": p.policy_version,
        "operation_digest": p.operation_digest,
        "opened_at": env.recorded_at,
        "due_at": p.due_at,
        "expires_at": p.expires_at,
        "token_hash": p.token_hash,
        "correction_schema_json": p.correction_schema_json,
    }


@dataclass
class TaskWrites:
    """The inbox changes of one projector batch, queued on the read model's transaction.

    It also carries what the batch's LLM usage needs of the states before it:
    ``earlier_activity_types`` (workflow id -> activity id -> type) of each run that
    continued as new in the batch, whose new state no longer knows the activities of
    the run a completed node belonged to.
    """

    keys: TaskKeys
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: dict[str, list[str]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    opened_at: dict[str, int] = field(default_factory=dict)
    open_score: dict[str, int] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    earlier_activity_types: dict[str, dict[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def queue(self, pipe: Any) -> None:
        k = self.keys
        for task_id, row in self.rows.items():
            pipe.hset(k.task(task_id), mapping=row)
            if self.lines.get(task_id):
                pipe.rpush(k.history(task_id), *self.lines[task_id])
        for th, task_id in self.tokens.items():
            pipe.set(k.token(th), task_id)
        if self.opened_at:
            pipe.zadd(k.all, self.opened_at)
        if self.open_score:
            pipe.zadd(k.open, self.open_score)
        if self.closed:
            pipe.zrem(k.open, *self.closed)


#: One workflow's part of a projector batch: old state, new state, events, history lines.
Folded = tuple[WorkflowState | None, WorkflowState, Sequence[Envelope[Any]], Sequence[str]]


def _closes(payload: Any) -> bool:
    return isinstance(payload, CLOSING_EVENTS) or getattr(payload, "TERMINAL", False)


def task_writes(keys: TaskKeys, batch: Iterable[Folded]) -> TaskWrites:
    """The inbox changes of a batch: per workflow (old state, new state, the events folded
    in this batch and their history lines).

    Each change is found at the event that made it, never from where a batch happens to
    end: a task's row is written with its own events and with the event that closed it
    undecided (that event's line goes to the task's history too).
    """
    out = TaskWrites(keys)
    for old, new, events, lines in batch:
        if not new.human_tasks:  # most runs: no task ever (tasks are kept, never emptied)
            continue
        before = old.open_human_task() if old is not None else None
        open_id = before.task_id if before is not None else None
        changed_at: dict[str, int] = {}
        for env, line in zip(events, lines, strict=True):
            p = env.payload
            if isinstance(p, TASK_EVENTS):
                tid = p.task_id
                out.lines.setdefault(tid, []).append(line)
                changed_at[tid] = env.recorded_at
                if isinstance(p, HumanTaskOpened):
                    out.rows.setdefault(tid, {}).update(_opened(p, env))
                    out.opened_at[tid] = env.recorded_at
                    if p.token_hash:
                        out.tokens[p.token_hash] = tid
                    open_id = tid
                elif isinstance(p, ENDING_TASK_EVENTS) and tid == open_id:
                    open_id = None
            elif open_id is not None and _closes(p):
                closed = new.human_tasks.get(open_id)
                if closed is not None and closed.status == HumanTaskStatus.CLOSED:
                    out.lines.setdefault(open_id, []).append(line)
                    changed_at[open_id] = env.recorded_at
                open_id = None
        for tid, at in changed_at.items():
            task = new.human_tasks.get(tid)
            if task is None:
                continue
            out.rows.setdefault(tid, {}).update(_fields(task, at))
            if task.is_open:
                out.open_score[tid] = task.due_at or task.expires_at
                out.closed.discard(tid)
            else:
                out.closed.add(tid)
                out.open_score.pop(tid, None)
    return out


def public_view(row: dict[str, str], run_status: str | None = None) -> dict[str, Any]:
    """A stored task as JSON: numbers as numbers, the evidence parsed (bounded);
    ``run_status`` is the status of the task's workflow now (its row's)."""
    from orchestrator.domain.model.limits import loads_bounded

    def num(name: str) -> int | None:
        value = row.get(name, "")
        return int(value) if value not in ("", None) else None

    def parsed(name: str, what: str) -> Any:
        try:
            return loads_bounded(row.get(name) or "null", what)
        except ValueError:
            return row.get(name)

    return {
        "task_id": row.get("task_id"),
        "task_name": row.get("task_name"),
        "workflow_id": row.get("workflow_id"),
        "run_id": row.get("run_id"),
        "status": row.get("status"),
        "owner": row.get("owner"),
        "role": row.get("role"),
        "roles": json.loads(row.get("roles_json") or "[]"),
        "level": num("level") or 0,
        "reminders": num("reminders") or 0,
        "opened_at": num("opened_at"),
        "due_at": num("due_at") or None,
        "expires_at": num("expires_at"),
        "resource": row.get("resource"),
        "operation_digest": row.get("operation_digest"),
        "schema_version": num("schema_version"),
        "policy_version": row.get("policy_version"),
        "evidence": parsed("evidence_json", "evidence"),
        "evidence_digest": row.get("evidence_digest"),
        "decision": row.get("decision") or None,
        "actor": row.get("actor") or None,
        "decided_at": num("decided_at"),
        "expiry_outcome": row.get("expiry_outcome") or None,
        "correction_schema": parsed("correction_schema_json", "correction schema"),
        "correction": parsed("correction_json", "correction"),
        "run_status": run_status,
    }


class TasksView:
    """Reads of the inbox (the connector's ``GET /tasks``, ``keel human-tasks``)."""

    def __init__(self, client: Any, topic_prefix: str) -> None:
        self.r = client
        self.ks = Keyspace(topic_prefix, clustered=is_cluster(client))
        self.keys = TaskKeys(self.ks)

    def _row(self, task_id: str) -> dict[str, str] | None:
        row = self.r.hgetall(self.keys.task(task_id))
        return {str(k): str(v) for k, v in row.items()} if row else None

    def _with_run_status(self, rows: list[dict[str, str]]) -> list[dict[str, Any]]:
        """The rows' public views, each with its workflow's status read now."""
        pipe = self.r.pipeline(transaction=False)
        for row in rows:
            pipe.hget(self.ks.workflow(row.get("workflow_id", "")), "status")
        statuses = pipe.execute() if rows else []
        return [
            public_view(row, None if status is None else str(status))
            for row, status in zip(rows, statuses, strict=True)
        ]

    def get(self, task_id: str) -> dict[str, Any] | None:
        row = self._row(task_id)
        return None if row is None else self._with_run_status([row])[0]

    def token_hash_of(self, task_id: str) -> str | None:
        value = self.r.hget(self.keys.task(task_id), "token_hash")
        return None if value is None else str(value)

    def by_token_hash(self, token_hash: str) -> dict[str, Any] | None:
        task_id = self.r.get(self.keys.token(token_hash))
        return None if task_id is None else self.get(str(task_id))

    def history(self, task_id: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange(self.keys.history(task_id), 0, -1)]

    def list(
        self,
        *,
        owner: str | None = None,
        role: str | None = None,
        include_closed: bool = False,
        limit: int = MAX_LISTED,
    ) -> list[dict[str, Any]]:
        """Open tasks by due time (or every task by opening time), optionally one owner's
        or those a role may decide."""
        key = self.keys.all if include_closed else self.keys.open
        ids = [str(x) for x in self.r.zrange(key, 0, MAX_LISTED - 1)]
        pipe = self.r.pipeline(transaction=False)
        for tid in ids:
            pipe.hgetall(self.keys.task(tid))
        rows = []
        for raw in pipe.execute():
            if not raw:
                continue
            row = {str(k): str(v) for k, v in raw.items()}
            if owner is not None and row.get("owner") != owner:
                continue
            if role is not None and role not in json.loads(row.get("roles_json") or "[]"):
                continue
            rows.append(row)
            if len(rows) >= limit:
                break
        return self._with_run_status(rows)
