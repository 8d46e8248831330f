"""The connector's human-task API: the inbox and decisions (docs/connector.md).

* ``GET /tasks[?owner=O&role=R&all=1]``: open tasks (``all``: every task), by due time;
  each task the caller may decide carries its ``token`` (the decision link's secret part).
* ``GET /tasks/{token}``: one task with its evidence and history.
* ``POST /tasks/{token}/decision`` with ``{"decision": "approve"|"reject", "reason": str,
  "operation_digest": <the digest shown with the task>, "correction": <JSON>}``
  (``correction``: a correction task's approval carries the corrected data).

Every route needs ``Authorization: Bearer <actor token>`` (connectors/auth.py); 401 comes
before anything about a task is looked at. What a decision answers comes from what the
orchestrator decided (orchestrator/client/human_task_decisions.py). A task token is never
logged: log lines name the task id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from functools import partial
from typing import Any

from aiohttp import web

from connectors.auth import Actor, Actors
from orchestrator.client.human_task_decisions import MAX_REASON_CHARS, TaskDesk
from orchestrator.domain.model.errors import KeelError, UnavailableError
from orchestrator.domain.model.vocabulary import HumanDecision
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.runtime.human_task_tokens import TaskTokens

__all__ = ["TaskApi"]

log = logging.getLogger("keel.connector")

#: The largest decision body read (a correction task's body carries the corrected data).
MAX_DECISION_BYTES = 64 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TOKEN = re.compile(r"^[0-9a-f]{64}$")


def _error(status: int, reason: str, **headers: str) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers or None)


class TaskApi:
    """The task routes of one connector process."""

    def __init__(
        self,
        actors: Actors,
        view: TasksView,
        desk: TaskDesk,
        tokens: TaskTokens | None,
    ) -> None:
        self.actors = actors
        self.view = view
        self.desk = desk
        self.tokens = tokens

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/tasks", self.list_tasks)
        app.router.add_get("/tasks/{token}", self.show_task)
        app.router.add_post("/tasks/{token}/decision", self.decide)

    # ------------------------------------------------------------------ helpers
    def _actor(self, request: web.Request) -> Actor | web.Response:
        if not self.actors:
            return _error(401, "no actors are configured (KEEL_ACTORS_FILE); nobody may decide")
        actor = self.actors.authenticate(request.headers.get("Authorization"))
        if actor is None:
            return _error(
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
        return web.json_response({"actor": actor.name, "tasks": tasks})

    async def show_task(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        if isinstance(actor, web.Response):
            return actor
        token = request.match_info["token"]
        if not _TOKEN.match(token):
            return _error(404, "no human task has this token")
        try:
            task = await self._run(self.desk.find, token)
            if task is None:
                return _error(404, "no human task has this token")
            task["history"] = await self._run(self.view.history, task["task_id"])
        except Exception as exc:
            return _unavailable(exc)
        return web.json_response(task)

    async def decide(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        if isinstance(actor, web.Response):
            return actor
        token = request.match_info["token"]
        body = await _read_body(request)
        if isinstance(body, web.Response):
            return body
        decision, reason, digest, correction = body
        if not _TOKEN.match(token):
            # not a token Keel ever issues: nothing can have it
            return _error(404, "no human task has this token")
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
            return _error(400, str(exc))
        except Exception as exc:  # Redis or Kafka unavailable while reading/sending
            return _unavailable(exc)
        task_id = outcome.task["task_id"] if outcome.task else "-"
        log.info(
            "human task %s: %s by '%s': %s (%d)",
            task_id,
            decision,
            actor.name,
            outcome.status,
            outcome.http_status,
        )
        return web.json_response(outcome.body(), status=outcome.http_status)


async def _read_body(
    request: web.Request,
) -> tuple[str, str, str | None, Any] | web.Response:
    """``(decision, reason, operation digest, correction)`` of a decision body, or the 4xx
    answer."""
    if request.content_length is not None and request.content_length > MAX_DECISION_BYTES:
        return _error(413, f"a decision body is at most {MAX_DECISION_BYTES:,} bytes")
    raw = await request.content.read(MAX_DECISION_BYTES + 1)
    if len(raw) > MAX_DECISION_BYTES:
        return _error(413, f"a decision body is at most {MAX_DECISION_BYTES:,} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return _error(400, f"the body is not JSON: {str(exc)[:200]}")
    if not isinstance(data, dict):
        return _error(400, "the body must be a JSON object")
    unknown = set(data) - {"decision", "reason", "operation_digest", "correction"}
    if unknown:
        return _error(400, f"unknown field(s): {', '.join(sorted(map(str, unknown)))[:200]}")
    decision = data.get("decision")
    if decision not in tuple(HumanDecision):
        return _error(400, "decision must be 'approve' or 'reject'")
    reason = data.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        return _error(400, f"reason must be text of at most {MAX_REASON_CHARS} characters")
    digest = data.get("operation_digest")
    if digest is not None and (not isinstance(digest, str) or not _HEX64.match(digest)):
        return _error(400, "operation_digest must be the 64-hex digest shown with the task")
    if decision == HumanDecision.APPROVE and digest is None:
        return _error(
            400, "an approval names the operation_digest it approves (shown with the task)"
        )
    return str(decision), reason, digest, data.get("correction")


def _unavailable(exc: Exception) -> web.Response:
    log.warning("human tasks: 503: %s: %s", type(exc).__name__, str(exc)[:300])
    return _error(503, f"the read model or Kafka is unavailable: {type(exc).__name__}",
                  **{"Retry-After": "1"})  # fmt: skip
