"""The connector's human-task API: the inbox and decisions (docs/connector.md).

* ``GET /tasks[?owner=O&role=R&all=1]``: open tasks (``all``: every task), by due time;
  each task the caller may decide carries its ``token`` (the decision link's secret part).
* ``GET /tasks/{token}``: one task with its evidence and history.
* ``POST /tasks/{token}/decision`` with ``{"decision": "approve"|"reject", "reason": str,
  "operation_digest": <the digest shown with the task>, "correction": <JSON>}``
  (``correction``: a correction task's approval carries the corrected data).

Every route needs ``Authorization: Bearer <actor token>`` (connectors/auth.py); 401 comes
before anything about a task is looked at. What a decision answers comes from what the
orchestrator decided (orchestrator/client/human_task_decisions.py). A decision body is
read within the read timeout and checked by the input rule of docs/limits.md (``NaN``, a
lone surrogate or invalid UTF-8 is a 400). A task token is never logged: log lines name the
task id.
"""

from __future__ import annotations

import asyncio
import logging
import re
from functools import partial
from typing import Any

from aiohttp import web

from connectors.auth import Actor, Actors
from connectors.json_answers import error_answer, json_answer, read_body
from connectors.webhooks import parse_body
from orchestrator.client.human_task_decisions import (
    MAX_REASON_CHARS,
    DecisionOutcome,
    DecisionStatus,
    Refusal,
    TaskDesk,
)
from orchestrator.domain.model.errors import InvalidInputError, KeelError, UnavailableError
from orchestrator.domain.model.vocabulary import HumanDecision
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.trust.human_task_tokens import TaskTokens

__all__ = ["TaskApi"]

log = logging.getLogger("keel.connector")

#: The largest decision body read (a correction task's body carries the corrected data).
MAX_DECISION_BYTES = 64 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TOKEN = re.compile(r"^[0-9a-f]{64}$")


class TaskApi:
    """The task routes of one connector process."""

    def __init__(
        self,
        actors: Actors,
        view: TasksView,
        desk: TaskDesk,
        tokens: TaskTokens | None,
        *,
        read_timeout_s: float = 10.0,
    ) -> None:
        self.actors = actors
        self.view = view
        self.desk = desk
        self.tokens = tokens
        self.read_timeout_s = read_timeout_s

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/tasks", self.list_tasks)
        app.router.add_get("/tasks/{token}", self.show_task)
        app.router.add_post("/tasks/{token}/decision", self.decide)

    # ------------------------------------------------------------------ helpers
    def _actor(self, request: web.Request) -> Actor | web.Response:
        if not self.actors:
            return error_answer(
                401, "no actors are configured (KEEL_ACTORS_FILE); nobody may decide"
            )
        actor = self.actors.authenticate(request.headers.get("Authorization"))
        if actor is None:
            return error_answer(
                401,
                "missing or unknown bearer token (Authorization: Bearer <actor token>)",
                **{"WWW-Authenticate": 'Bearer realm="keel"'},
            )
        return actor

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))

    def _token_for(self, task: dict[str, Any], actor: Actor) -> str | None:
        """The task's token, for an actor who may decide it (and only if it is the one
        the orchestrator recorded: a connector with another key shows none)."""
        if self.tokens is None or not set(actor.roles) & set(task["roles"]):
            return None
        token = self.tokens.issue(task["task_id"])
        recorded = self.view.token_hash_of(task["task_id"])
        from orchestrator.domain.authoring.waits import token_hash

        return token if recorded == token_hash(token) else None

    # ------------------------------------------------------------------ routes
    async def list_tasks(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        if isinstance(actor, web.Response):
            return actor
        q = request.query
        try:
            tasks = await self._run(
                self.view.list,
                owner=q.get("owner") or None,
                role=q.get("role") or None,
                include_closed=q.get("all") in ("1", "true", "yes"),
            )
        except (KeelError, OSError, ConnectionError) as exc:
            return _unavailable(exc)
        except Exception as exc:  # Redis errors
            return _unavailable(exc)
        for t in tasks:
            if t["status"] == "open":
                token = await self._run(self._token_for, t, actor)
                if token is not None:
                    t["token"] = token
        return json_answer({"actor": actor.name, "tasks": tasks})

    async def show_task(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        if isinstance(actor, web.Response):
            return actor
        token = request.match_info["token"]
        if not _TOKEN.match(token):
            return error_answer(404, "no human task has this token")
        try:
            task = await self._run(self.desk.find, token)
            if task is None:
                return error_answer(404, "no human task has this token")
            task["history"] = await self._run(self.view.history, task["task_id"])
        except Exception as exc:
            return _unavailable(exc)
        return json_answer(task)

    async def decide(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        if isinstance(actor, web.Response):
            return actor
        token = request.match_info["token"]
        body = await _read_decision(request, self.read_timeout_s)
        if isinstance(body, web.Response):
            return body
        decision, reason, digest, correction = body
        if not _TOKEN.match(token):
            # not a token Keel ever issues: nothing can have it
            return error_answer(404, "no human task has this token")
        try:
            outcome = await self._run(
                self.desk.decide,
                token,
                actor.name,
                list(actor.roles),
                decision,
                reason,
                digest,
                correction,
            )
        except UnavailableError as exc:
            return _unavailable(exc)
        except KeelError as exc:
            return error_answer(400, str(exc))
        except Exception as exc:  # Redis or Kafka unavailable while reading/sending
            return _unavailable(exc)
        task_id = outcome.task["task_id"] if outcome.task else "-"
        log.info(
            "human task %s: %s by '%s': %s (%d)",
            task_id,
            decision,
            actor.name,
            outcome.status,
            http_status(outcome),
        )
        return json_answer(outcome.as_dict(), http_status(outcome))


#: The HTTP status the connector answers each kind of refusal with (docs/connector.md).
REFUSAL_STATUS: dict[Refusal, int] = {
    Refusal.FORBIDDEN: 403,
    Refusal.NOT_FOUND: 404,
    Refusal.GONE: 410,
    Refusal.CONFLICT: 409,
    Refusal.INVALID: 400,
    Refusal.INVALID_CORRECTION: 422,
    Refusal.UNAVAILABLE: 503,
}


def http_status(outcome: DecisionOutcome) -> int:
    """A decision's answer as HTTP: its refusal's status; 202 while the orchestrator has
    not answered; else 200 (decided now, or the same decision before)."""
    if outcome.refusal is not None:
        return REFUSAL_STATUS[outcome.refusal]
    return 202 if outcome.status is DecisionStatus.PENDING else 200


async def _read_decision(
    request: web.Request, timeout_s: float
) -> tuple[str, str, str | None, Any] | web.Response:
    """``(decision, reason, operation digest, correction)`` of a decision body, or the 4xx
    answer."""
    raw = await read_body(request, MAX_DECISION_BYTES, timeout_s)
    if isinstance(raw, web.Response):
        return raw
    try:
        data = parse_body(raw, MAX_DECISION_BYTES)  # the same rule as a webhook's body
    except InvalidInputError as exc:
        return error_answer(400, str(exc))
    unknown = set(data) - {"decision", "reason", "operation_digest", "correction"}
    if unknown:
        return error_answer(400, f"unknown field(s): {', '.join(sorted(map(str, unknown)))[:200]}")
    decision = data.get("decision")
    if decision not in tuple(HumanDecision):
        return error_answer(400, "decision must be 'approve' or 'reject'")
    reason = data.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        return error_answer(400, f"reason must be text of at most {MAX_REASON_CHARS} characters")
    digest = data.get("operation_digest")
    if digest is not None and (not isinstance(digest, str) or not _HEX64.match(digest)):
        return error_answer(400, "operation_digest must be the 64-hex digest shown with the task")
    if decision == HumanDecision.APPROVE and digest is None:
        return error_answer(
            400, "an approval names the operation_digest it approves (shown with the task)"
        )
    return str(decision), reason, digest, data.get("correction")


def _unavailable(exc: Exception) -> web.Response:
    log.warning("human tasks: 503: %s: %s", type(exc).__name__, str(exc)[:300])
    return error_answer(503, f"the read model or Kafka is unavailable: {type(exc).__name__}",
                  **{"Retry-After": "1"})  # fmt: skip
