"""Local activities: steps marked ``local=True`` run inside the orchestrator process.

A local step is run right after the decision that schedules it, and its report is
decided in the same transaction (docs/performance.md, "Local activities"), so a chain
of local steps costs one commit instead of two per step. The guarantees are those of a
remote worker:

* **at-least-once execution**: nothing is recorded until the transaction commits; a
  crash or an aborted batch rewinds the command, whose decision schedules the same
  attempt with the same idempotency key K, and the step runs again;
* **exactly-once recording**: the report is decided like a worker's (same message id
  shape), so a duplicate can never record twice;
* **effects keyed by K**: ``@side_effect`` handlers go through the same effect store
  (``handlers.execution``), so a rerun after a crash returns the recorded result.

Each run is bounded: ``min(start_to_close, bound_ms)``. A run past its bound is
cancelled and reports nothing; the step's durable start-to-close timer then fails the
attempt like any timeout. A step without ``start_to_close`` has no timer to wait for,
so an overrun is reported at once as a ``StartToCloseTimeout`` failure (outcome
``unknown`` for a ``@side_effect`` handler, ``transient`` otherwise).

Steps that need a worker's start report (``schedule_to_start`` or ``heartbeat``
timeouts), steps whose handler this application lacks and status queries are sent to
the workers as usual; so are all local steps while the effect store's Redis is known to
be down (the workers wait an outage out without failing the attempt).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.app import KeelApp
from orchestrator.domain.definitions import Step
from orchestrator.domain.messages import ActivityScheduled, CompleteActivity, FailActivity
from orchestrator.domain.state import WorkflowState
from orchestrator.domain.vocabulary import TimeoutKind
from orchestrator.runtime.broker_errors import TxnAbortable

__all__ = ["LOCAL_BOUND_MS", "LocalActivities", "LocalRun"]

log = logging.getLogger("keel.orchestrator.local")

#: The longest a local activity may hold the orchestrator's loop (and its transaction).
LOCAL_BOUND_MS = 2000


@dataclass(frozen=True, slots=True)
class LocalRun:
    """One scheduled local attempt: where it belongs and what bounds it."""

    partition: int
    workflow_id: str
    run_id: str
    event_message_id: str
    correlation_id: str | None
    scheduled: ActivityScheduled
    bound_ms: int
    #: The step has a durable start-to-close timer that fails an overrun.
    timer_armed: bool

    @property
    def task_message_id(self) -> str:
        """The id the task record would have had (``envelopes.follow_up(ev, "task")``)."""
        return f"{self.event_message_id}/task"

    @property
    def report_message_id(self) -> str:
        """The id a worker gives its report, so a local report is recorded the same way."""
        return f"{self.task_message_id}/report/{self.scheduled.attempt}"


class LocalActivities:
    """Runs local steps of one orchestrator on a private event loop, each bounded."""

    def __init__(
        self,
        app: KeelApp,
        *,
        redis_url: str | None,
        topic_prefix: str,
        stop: threading.Event,
        bound_ms: int = LOCAL_BOUND_MS,
        effects: Any = None,
    ) -> None:
        self.app = app
        self.redis_url = redis_url
        self.topic_prefix = topic_prefix
        self.stop = stop
        self.bound_ms = bound_ms
        self._effects = effects
        self._gate: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.runs = 0
        self.overruns = 0
        self.run_ms = 0.0

    # ------------------------------------------------------------------ what is local
    def plan(
        self,
        definition_for: Callable[[WorkflowState], Any],
        state: WorkflowState,
        partition: int,
        event_message_id: str,
        correlation_id: str | None,
        scheduled: ActivityScheduled,
    ) -> LocalRun | None:
        """The local run of ``scheduled``, or None when it goes to the workers."""
        step: Step | None = definition_for(state).steps_by_name.get(scheduled.step)
        if step is None or not getattr(step, "local", False):
            return None
        if step.activity != scheduled.activity_type or step.report_start:
            return None  # a status query, or a step that needs a worker's start report
        if scheduled.activity_type not in self.app.handlers:
            return None
        if self._gate is not None and self._gate.is_down:
            return None  # Redis away: the workers wait out the outage without failing it
        s2c = step.timeout_ms(TimeoutKind.START_TO_CLOSE)
        bound = self.bound_ms if s2c is None else min(s2c, self.bound_ms)
        return LocalRun(
            partition,
            state.workflow_id,
            state.run_id,
            event_message_id,
            correlation_id,
            scheduled,
            max(1, bound),
            s2c is not None,
        )

    # ------------------------------------------------------------------ running
    def run(self, runs: list[LocalRun]) -> list[CompleteActivity | FailActivity | None]:
        """Run ``runs`` concurrently; each one's report, or None when the timer will fail it."""
        if not runs:
            return []
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        began = time.perf_counter()
        out = self._loop.run_until_complete(self._all(runs))
        self.run_ms += (time.perf_counter() - began) * 1000
        self.runs += len(runs)
        return list(out)

    async def _all(self, runs: list[LocalRun]) -> list[CompleteActivity | FailActivity | None]:
        return list(await asyncio.gather(*(self._one(r) for r in runs)))

    def _store(self) -> tuple[Any, Any]:
        from handlers.effects import EffectStore, RedisGate

        if self._effects is None:
            if not self.redis_url:
                raise RuntimeError("a @side_effect local activity needs KEEL_REDIS_URL")
            self._effects = EffectStore.from_url(self.redis_url, self.topic_prefix)
        if self._gate is None:
            self._gate = RedisGate(self.stop)
        return self._effects, self._gate

    async def _one(self, r: LocalRun) -> CompleteActivity | FailActivity | None:
        from handlers.context import ActivityContext, reset_current, set_current
        from handlers.effects import Stopping, has_side_effect
        from handlers.errors import classify, error_type
        from handlers.execution import describe, execute, parse_input, result_json

        s = r.scheduled
        handler = self.app.handler(s.activity_type)
        side_effect = has_side_effect(handler.fn)
        effects: Any = None
        gate: Any = None
        ctx = ActivityContext(
            workflow_id=r.workflow_id,
            activity_id=s.activity_id,
            activity_type=s.activity_type,
            attempt=s.attempt,
            logical_attempt=s.logical_attempt,
            idempotency_key=s.idempotency_key,
            heartbeat_ms=0,
            _send=lambda _details: None,  # a local step has no heartbeat timeout
        )

        def running() -> Any:
            return execute(
                self.app,
                effects,
                gate,
                s.activity_type,
                s.input_json,
                s.idempotency_key,
                s.attempt,
            )

        def in_thread() -> str:
            # A sync handler would block the loop past any bound: it runs on a thread of
            # its own (with the activity context), and is abandoned if it overruns.
            inner = set_current(ctx)
            try:
                if not side_effect:
                    arg = parse_input(handler, s.input_json)
                    return result_json(handler, handler.fn(arg), side_effect=False)
                return asyncio.run(running())
            finally:
                reset_current(inner)

        token = set_current(ctx)
        try:
            if side_effect:  # only a @side_effect handler touches the effect store
                effects, gate = self._store()
            work = running() if handler.is_async else asyncio.to_thread(in_thread)
            result = await asyncio.wait_for(work, r.bound_ms / 1000)
        except TimeoutError:
            self.overruns += 1
            log.warning(
                "local activity %s of %s overran its %d ms bound%s",
                s.activity_id,
                r.workflow_id,
                r.bound_ms,
                "; its start-to-close timer will fail it" if r.timer_armed else "",
            )
            if r.timer_armed:
                return None
            return FailActivity(
                s.activity_id,
                s.attempt,
                "unknown" if side_effect else "transient",
                "StartToCloseTimeout",
                f"local activity exceeded its in-process bound of {r.bound_ms} ms",
            )
        except Stopping as exc:  # stopping while Redis is away: nothing may be committed
            raise TxnAbortable(f"local activity {s.activity_id} abandoned: {exc}") from exc
        except Exception as exc:
            return FailActivity(
                s.activity_id, s.attempt, str(classify(exc)), error_type(exc), describe(exc)
            )
        finally:
            reset_current(token)
        return CompleteActivity(s.activity_id, s.attempt, result, handler.schema_version)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None
