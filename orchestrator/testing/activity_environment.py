"""Run one activity handler outside any workflow, with the context a worker gives it.

Like Temporal's ``ActivityEnvironment``: a handler that reads ``activity.context()`` (its
idempotency key, attempt, heartbeats) is called with a context the test chooses, and
every heartbeat it sends is kept (``heartbeats``). :meth:`ActivityEnvironment.run` calls
the function as it is; :meth:`ActivityEnvironment.execute` runs a registered activity the
way the worker does (the worker's ``handlers.attempt_runner.AttemptRunner``: the input
validated against its model, a
``@side_effect`` handler's claim on its idempotency key, the result checked against its
output model), so a second call with the same key returns the recorded result instead of
writing again.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from handlers.attempt_runner import AttemptRunner, attempt_context
from handlers.effects import RedisGate
from handlers.sdk.activity_context import ActivityContext, reset_current, set_current
from orchestrator.application.app import KeelApp
from orchestrator.domain.model.keys import idempotency_key
from orchestrator.domain.model.messages import ActivityTask
from orchestrator.records.clock import ManualClock
from orchestrator.testing.activity_stubs import ActivityRef, activity_type_of
from orchestrator.testing.memory_stores import MemoryEffectBook
from orchestrator.trust.sealing import SealKeys, SealKeySource

__all__ = ["ActivityEnvironment"]


class ActivityEnvironment:
    """The context of one attempt: ``workflow_id``, ``activity_type``, ``attempt`` and
    ``logical_attempt`` make the idempotency key as the engine makes it (unless
    ``idempotency_key`` is given); ``heartbeat_ms`` spaces heartbeats as the worker does,
    on a manual clock (``clock``); ``seal_keys`` open a sealed input and seal a sensitive
    result in :meth:`execute` (none: a sealed value is refused)."""

    def __init__(
        self,
        *,
        workflow_id: str = "test-workflow",
        activity_id: str = "run#1/step",
        activity_type: str = "activity",
        attempt: int = 1,
        logical_attempt: int = 1,
        idempotency_key: str | None = None,
        heartbeat_ms: int = 0,
        seal_keys: SealKeys | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.activity_id = activity_id
        self.activity_type = activity_type
        self.attempt = attempt
        self.logical_attempt = logical_attempt
        self._key = idempotency_key
        self.heartbeat_ms = heartbeat_ms
        self.clock = ManualClock(0)
        # a worker's monotonic clock is far past 0 when a handler first beats: so here
        self.clock.advance(24 * 3600)
        #: Details of every heartbeat sent (decoded JSON), in order.
        self.heartbeats: list[Any] = []
        #: The effect records ``execute`` claims, as the worker's Redis would hold them.
        self.effects = MemoryEffectBook()
        self._seal_keys = SealKeySource(keys=seal_keys)

    @property
    def idempotency_key(self) -> str:
        if self._key is not None:
            return self._key
        return idempotency_key(self.workflow_id, self.activity_type, self.logical_attempt)

    def context(self, activity_type: str | None = None) -> ActivityContext:
        """The context a handler reads with ``activity.context()``."""
        return attempt_context(
            self.workflow_id,
            self._attempt(activity_type or self.activity_type, "null"),
            heartbeat_ms=self.heartbeat_ms,
            send=self._beat,
            monotonic=self.clock.monotonic,
        )

    def _beat(self, details: str) -> None:
        self.heartbeats.append(json.loads(details))

    def _attempt(self, kind: str, input_json: str) -> ActivityTask:
        """This attempt of ``kind`` as the worker's task would carry it."""
        key = self._key or idempotency_key(self.workflow_id, kind, self.logical_attempt)
        return ActivityTask(
            self.activity_id, kind, "", input_json, self.logical_attempt, self.attempt, key
        )

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn`` (sync, or async: run to completion) inside this attempt's context."""
        token = set_current(self.context())
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = _run_coroutine(result)
            return result
        finally:
            reset_current(token)

    def execute(self, app: KeelApp, activity: ActivityRef, input: Any) -> Any:
        """Run ``app``'s handler of ``activity`` with ``input`` (a JSON value or a model) as
        the worker does; its result as the JSON value the worker would report. The
        handler's exception propagates, as the worker would classify it."""
        kind = activity_type_of(app, activity)
        text = input.model_dump_json() if isinstance(input, BaseModel) else json.dumps(input)
        runner = AttemptRunner(app, seal_keys=self._seal_keys, clock=self.clock)
        spec = self._attempt(kind, text)
        ctx = runner.context(
            self.workflow_id, spec, heartbeat_ms=self.heartbeat_ms, send=self._beat
        )

        async def attempt() -> str:
            gate = RedisGate(threading.Event(), clock=self.clock)
            return await runner.execute(spec, self.effects, gate)

        token = set_current(ctx)
        try:
            return json.loads(_run_coroutine(attempt()))
        finally:
            reset_current(token)


def _run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion on a new loop (in a thread when the caller's thread has
    a running loop, e.g. an async test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    out: list[Any] = []
    err: list[BaseException] = []

    def work() -> None:
        try:
            out.append(asyncio.run(coro))
        except BaseException as exc:
            err.append(exc)

    context = contextvars.copy_context()  # the activity's context goes with it
    thread = threading.Thread(target=context.run, args=(work,), name="keel-activity-test")
    thread.start()
    thread.join()
    if err:
        raise err[0]
    return out[0]
