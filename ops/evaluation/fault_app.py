"""The worker's side of ``keel evaluate --app`` (docs/evaluation.md, "Your own workflow"):
your application, with every activity handler wrapped to keep a book of its calls and to
inject the batch's fault where Keel has no fake of your external system.

The batch starts the orchestrator and the worker with ``--app
ops.evaluation.fault_app:app`` and names, in their environment, your application
(``KEEL_EVAL_APP``), the workflow (``KEEL_EVAL_WORKFLOW``), the fault class
(``KEEL_EVAL_FAULT``) and the Redis key the book is kept under (``KEEL_EVAL_BOOK``);
under ``old_schema``, once the batch deploys the next version, ``KEEL_EVAL_DEPLOYED``
adds it (``ops/evaluation/next_version.py``). The definitions are yours, unchanged (the
orchestrator decides as it would); only the worker calls the wrapped handlers. Kept in
Redis, so the book survives a SIGKILLed worker:

* every call that returned, by activity type and idempotency key (a ``@side_effect``
  handler that returned twice for one key made its effect twice);
* ``response_loss``: every third first attempt of a *write* (a step with a status query,
  ``on_unknown="retry"``, or a ``@side_effect`` handler) returns, its effect made, and its
  answer is lost: the worker reports ``OutcomeUnknownError``;
* ``queue_full``: every write fails as a downstream answering 503 with ``Retry-After: 1``
  for ``OUTAGE_S`` from the first write's call (``TransientError``, the handler not called);
* ``compensation_failure``: every compensation keeps failing (``TransientError``), past
  its retries;
* ``crash``: one call of a run that already has a call behind it is held (at most
  ``HOLD_S``) and named in the book: the batch SIGKILLs the orchestrator and the worker
  during it, so the crash finds that run in flight however fast your steps are.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from handlers.sdk.markers import has_side_effect
from ops.evaluation.fault_plans import OUTAGE_RETRY_AFTER_S, OUTAGE_S, FaultClass
from ops.evaluation.next_version import deployed
from orchestrator import OnUnknown, OutcomeUnknownError, TransientError, activity
from orchestrator.application.app import ActivityHandler, KeelApp, load_app
from orchestrator.config.settings import Settings
from orchestrator.io.redis.client_factory import RedisUse, redis_client

__all__ = ["FaultBook", "Roles", "app", "roles_of", "wrapped_app"]

#: The worker's application and what it is told by the batch (environment variables).
APP_VARIABLE, WORKFLOW_VARIABLE = "KEEL_EVAL_APP", "KEEL_EVAL_WORKFLOW"
FAULT_VARIABLE, BOOK_VARIABLE = "KEEL_EVAL_FAULT", "KEEL_EVAL_BOOK"
DEPLOYED_VARIABLE = "KEEL_EVAL_DEPLOYED"
#: ``response_loss`` loses the answer of every ``LOSE_EVERY``-th first attempt of a write.
LOSE_EVERY = 3
#: ``crash`` holds a call this long at most, waiting for the SIGKILL.
HOLD_S = 20.0
_SEP = "\x1f"


@dataclass(frozen=True)
class Roles:
    """What each activity type of a workflow is to the faults: ``writes`` (the steps whose
    lost answer Keel can settle, or whose handler writes through the effect store),
    ``compensations``, and ``side_effects`` (``@side_effect`` handlers)."""

    writes: frozenset[str]
    compensations: frozenset[str]
    side_effects: frozenset[str]


def roles_of(keel_app: KeelApp, workflow: str) -> Roles:
    """The roles of the activity types of every version of ``workflow`` in ``keel_app``."""
    side = frozenset(t for t, h in keel_app.handlers.items() if has_side_effect(h.fn))
    writes: set[str] = set()
    undo: set[str] = set()
    for (name, _), definition in keel_app.definitions.items():
        if name != workflow:
            continue
        for step in definition.steps_by_name.values():
            if (
                step.status_query is not None
                or step.on_unknown != OnUnknown.ATTENTION
                or step.activity_type in side
            ):
                writes.add(step.activity_type)
        undo |= {s.activity_type for s in definition.compensation_steps.values()}
    return Roles(frozenset(writes - undo), frozenset(undo), side)


class FaultBook:
    """The book a batch's handlers keep in Redis under ``key`` (module doc)."""

    def __init__(self, redis_url: str, key: str) -> None:
        self._r = redis_client(redis_url, RedisUse.READ_MODEL)
        self.key = key

    def returned(self, activity_type: str, idempotency_key: str) -> None:
        self._r.hincrby(f"{self.key}:returned", f"{activity_type}{_SEP}{idempotency_key}", 1)

    def fired(self) -> None:
        self._r.incr(f"{self.key}:fired")

    def lose_answer(self, idempotency_key: str) -> bool:
        """Whether this first attempt's answer is lost: every ``LOSE_EVERY``-th, once a key."""
        n = int(self._r.incr(f"{self.key}:writes"))
        digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
        return n % LOSE_EVERY == 1 and bool(
            self._r.set(f"{self.key}:lost:{digest}", "1", nx=True, ex=3600)
        )

    def ran(self, workflow_id: str) -> None:
        """A call of ``workflow_id``'s returned: its run has work behind it."""
        self._r.sadd(f"{self.key}:ran", workflow_id)

    def hold(self, workflow_id: str) -> bool:
        """Whether to hold this call: the first of a run with work behind it, once a batch."""
        return bool(self._r.sismember(f"{self.key}:ran", workflow_id)) and bool(
            self._r.set(f"{self.key}:held", workflow_id, nx=True, ex=3600)
        )

    def outage_from_ms(self) -> int:
        """The outage's start: the first write's call (shared by every worker, restarts too)."""
        now = int(time.time() * 1000)
        self._r.set(f"{self.key}:outage_from", now, nx=True, ex=3600)
        return int(self._r.get(f"{self.key}:outage_from") or now)

    # -- read by the batch ----------------------------------------------------------

    def calls_returned(self) -> dict[tuple[str, str], int]:
        raw: dict[str, str] = self._r.hgetall(f"{self.key}:returned")  # type: ignore[assignment]
        out: dict[tuple[str, str], int] = {}
        for field_, count in raw.items():
            kind, _, key = field_.partition(_SEP)
            out[kind, key] = int(count)
        return out

    def held(self) -> str | None:
        """The run whose call is held (``crash``), if one is."""
        return self._r.get(f"{self.key}:held")  # type: ignore[return-value]

    def times_fired(self) -> int:
        return int(self._r.get(f"{self.key}:fired") or 0)

    def outage_ms(self) -> tuple[int, int] | None:
        start = self._r.get(f"{self.key}:outage_from")
        return None if start is None else (int(start), int(start) + int(OUTAGE_S * 1000))

    def close(self) -> None:
        self._r.close()


def _injector(book: FaultBook, fault: FaultClass, roles: Roles, kind: str) -> Callable[..., Any]:
    """The wrapper of one activity type's handler under ``fault``."""

    def held() -> bool:
        """Whether this call is the one ``crash`` holds for the batch's SIGKILL."""
        if fault is FaultClass.CRASH and book.hold(activity.context().workflow_id):
            book.fired()
            return True
        return False

    def before() -> None:
        down = fault is FaultClass.QUEUE_FULL and kind in roles.writes
        if down and time.time() * 1000 < book.outage_from_ms() + OUTAGE_S * 1000:
            book.fired()
            raise TransientError(
                "keel evaluate: the downstream is down (503)", retry_after_s=OUTAGE_RETRY_AFTER_S
            )
        if fault is FaultClass.COMPENSATION_FAILURE and kind in roles.compensations:
            book.fired()
            raise TransientError("keel evaluate: the compensation keeps failing")

    def after() -> None:
        ctx = activity.context()
        book.returned(kind, ctx.idempotency_key)
        if fault is FaultClass.CRASH:
            book.ran(ctx.workflow_id)
        if (
            fault is FaultClass.RESPONSE_LOSS
            and kind in roles.writes
            and ctx.attempt == 1
            and book.lose_answer(ctx.idempotency_key)
        ):
            book.fired()
            raise OutcomeUnknownError("keel evaluate: the answer was lost after the call returned")

    def wrap(handler: ActivityHandler) -> ActivityHandler:
        fn = handler.fn
        if handler.is_async:

            @functools.wraps(fn)
            async def run_async(arg: Any) -> Any:
                if held():
                    await asyncio.sleep(HOLD_S)  # the batch SIGKILLs this worker meanwhile
                before()
                out = await fn(arg)
                after()
                return out

            return replace(handler, fn=run_async)

        @functools.wraps(fn)
        def run(arg: Any) -> Any:
            if held():
                time.sleep(HOLD_S)  # the batch SIGKILLs this worker meanwhile
            before()
            out = fn(arg)
            after()
            return out

        return replace(handler, fn=run)

    return wrap


def wrapped_app(user_app: KeelApp, workflow: str, fault: FaultClass, book: FaultBook) -> KeelApp:
    """``user_app`` with every handler keeping ``book`` and injecting ``fault``."""
    roles = roles_of(user_app, workflow)
    out = KeelApp(f"{user_app.name} (keel evaluate: {fault})")
    for definition in user_app.definitions.values():
        out.workflow(definition)
    out.handlers = {
        kind: _injector(book, fault, roles, kind)(handler)
        for kind, handler in user_app.handlers.items()
    }
    out.external_activities = set(user_app.external_activities)
    out.webhooks = dict(user_app.webhooks)
    out.sagas = dict(user_app.sagas)
    out.llm_nodes = dict(user_app.llm_nodes)
    return out


def _from_environment() -> KeelApp:
    settings = Settings()
    book = FaultBook(settings.redis, os.environ[BOOK_VARIABLE])
    fault = FaultClass(os.environ[FAULT_VARIABLE])
    workflow = os.environ[WORKFLOW_VARIABLE]
    user_app = load_app(os.environ[APP_VARIABLE])
    if os.environ.get(DEPLOYED_VARIABLE):
        user_app = deployed(user_app, workflow)
    return wrapped_app(user_app, workflow, fault, book)


#: What ``--app ops.evaluation.fault_app:app`` names in a batch's processes.
app = _from_environment() if APP_VARIABLE in os.environ else KeelApp("keel evaluate (no app)")
