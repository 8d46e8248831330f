"""One attempt of an activity, run the same way by the worker, a local step and the test kit.

The worker (handlers/worker.py), the engine's local steps
(orchestrator/engine/local_activities.py) and the test kit's ``ActivityEnvironment``
(orchestrator/testing) each run an attempt through one :class:`AttemptRunner`, built once
per process by its composition root (orchestrator/cli/services.py) with the process's
sealing keys and clock. It gives the attempt its activity context, runs the handler
through ``handlers.execution`` (input, effect claim, call, result: the order that keeps
side effects safe, docs/activities.md) and turns what happened into the report: a
``CompleteActivity`` with the handler's schema version, or a ``FailActivity`` of the
exception's failure class. What a caller adds (heartbeats, limits, bounds, counts) stays
with the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from handlers.effects import RedisGate
from handlers.execution import (
    EffectBook,
    describe,
    execute,
    parse_input,
    result_json,
)
from handlers.handler_threads import HandlerThreads
from handlers.llm.runtime import LlmRuntimes
from handlers.sdk.activity_context import ActivityContext
from handlers.sdk.activity_errors import classify, error_type, retry_after_ms
from handlers.type_limits import StartLapsed
from orchestrator.application.app import KeelApp
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    ActivityTask,
    CompleteActivity,
    FailActivity,
)
from orchestrator.io.ports import Stopping
from orchestrator.records.clock import SYSTEM_CLOCK, Clock
from orchestrator.trust.sealing import SealKeySource

__all__ = ["AttemptOutcome", "AttemptRunner", "AttemptSpec", "attempt_context"]

#: What one attempt describes itself with: a worker's task or a local step's schedule.
AttemptSpec = ActivityTask | ActivityScheduled
#: The report of one attempt.
AttemptOutcome = CompleteActivity | FailActivity


def _no_heartbeat(_details: str) -> None:
    """A local step has no heartbeat timeout: its heartbeats go nowhere."""


def attempt_context(
    workflow_id: str,
    spec: AttemptSpec,
    *,
    heartbeat_ms: int,
    send: Callable[[str], None],
    monotonic: Callable[[], float],
    services: Mapping[type, object] | None = None,
) -> ActivityContext:
    """The context of one attempt: ``send`` takes its heartbeats (JSON details), spaced by
    ``heartbeat_ms`` on ``monotonic``; ``services``: what the process gives its attempts."""
    return ActivityContext(
        workflow_id=workflow_id,
        activity_id=spec.activity_id,
        activity_type=spec.activity_type,
        attempt=spec.attempt,
        logical_attempt=spec.logical_attempt,
        idempotency_key=spec.idempotency_key,
        heartbeat_ms=heartbeat_ms,
        _send=send,
        _monotonic=monotonic,
        services=services or {},
    )


class AttemptRunner:
    """Runs one attempt of ``app``'s handlers, async or sync, and reports it.

    ``seal_keys`` open a task's sealed input and seal the result's sensitive fields
    (docs/secrets.md); ``clock`` spaces the heartbeats of the contexts it builds; ``llm``
    is the process's LLM runtime, which its LLM steps find in their context (none: an LLM
    step fails saying where LLM steps run).
    """

    def __init__(
        self,
        app: KeelApp,
        *,
        seal_keys: SealKeySource,
        clock: Clock = SYSTEM_CLOCK,
        llm: LlmRuntimes | None = None,
    ) -> None:
        self.app = app
        self.seal_keys = seal_keys
        self.clock = clock
        self.llm = llm
        self._services: dict[type, object] = {} if llm is None else {LlmRuntimes: llm}

    def context(
        self,
        workflow_id: str,
        spec: AttemptSpec,
        *,
        heartbeat_ms: int = 0,
        send: Callable[[str], None] = _no_heartbeat,
    ) -> ActivityContext:
        """The context the handler reads with ``activity.context()``, on the runner's clock."""
        return attempt_context(
            workflow_id,
            spec,
            heartbeat_ms=heartbeat_ms,
            send=send,
            monotonic=self.clock.monotonic,
            services=self._services,
        )

    async def execute(
        self,
        spec: AttemptSpec,
        effects: EffectBook | None,
        gate: RedisGate | None,
        *,
        threads: HandlerThreads | None = None,
        on_start: Callable[[], None] | None = None,
        before_call: Callable[[], Awaitable[None]] | None = None,
    ) -> str:
        """The attempt's result as JSON; raises what failed (``handlers.execution.execute``).

        ``effects`` and ``gate`` are used by a ``@side_effect`` handler only; a sync
        handler runs on ``threads`` when given, else on the caller's thread; ``before_call``
        may refuse the call just before it is made (a lapsed rate-limit grant).
        """
        return await execute(
            self.app,
            effects,
            gate,
            spec.activity_type,
            spec.input_json,
            spec.idempotency_key,
            spec.attempt,
            threads=threads,
            on_start=on_start,
            seal_keys=self.seal_keys,
            before_call=before_call,
        )

    def execute_sync(
        self,
        spec: AttemptSpec,
        effects: EffectBook | None,
        gate: RedisGate | None,
        *,
        side_effect: bool,
    ) -> str:
        """:meth:`execute` of a sync handler on the caller's thread (a local step's runner).

        Without a side effect it is a plain call (no event loop per step); a side effect's
        claim and record need one, so that attempt runs on a loop of its own.
        """
        if side_effect:
            return asyncio.run(self.execute(spec, effects, gate))
        handler = self.app.handler(spec.activity_type)
        arg = parse_input(handler, spec.input_json, self.seal_keys)
        return result_json(handler, handler.fn(arg), side_effect=False, seal_keys=self.seal_keys)

    def completion(self, spec: AttemptSpec, result_json: str) -> CompleteActivity:
        """The report of a result: it carries the handler's schema version."""
        handler = self.app.handlers.get(spec.activity_type)
        version = 0 if handler is None else handler.schema_version
        return CompleteActivity(spec.activity_id, spec.attempt, result_json, version)

    @staticmethod
    def failure(spec: AttemptSpec, exc: BaseException) -> FailActivity:
        """The report of what ``exc`` says: its failure class, type, one-line message and
        the wait it asks for (handlers/sdk/activity_errors.py)."""
        return FailActivity(
            spec.activity_id,
            spec.attempt,
            str(classify(exc)),
            error_type(exc),
            describe(exc),
            retry_after_ms(exc),
        )

    async def run(
        self,
        spec: AttemptSpec,
        effects: EffectBook | None,
        gate: RedisGate | None,
        *,
        threads: HandlerThreads | None = None,
        on_start: Callable[[], None] | None = None,
        before_call: Callable[[], Awaitable[None]] | None = None,
    ) -> AttemptOutcome:
        """:meth:`execute`, reported. ``Stopping`` (the process stops while Redis is away)
        and ``StartLapsed`` (``before_call`` found the rate-limit grant lapsed: the handler
        was not called) propagate: the caller reports the one nothing, the other throttled."""
        try:
            result = await self.execute(
                spec, effects, gate, threads=threads, on_start=on_start, before_call=before_call
            )
        except (Stopping, StartLapsed):
            raise
        except Exception as exc:
            return self.failure(spec, exc)
        return self.completion(spec, result)
