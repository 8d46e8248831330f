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
  (``handlers.execution``), so a rerun after a crash returns the recorded result;
* **the same attempt**: the worker's :class:`~handlers.attempt_runner.AttemptRunner`
  builds the context, runs the handler and words the report (failure class, message,
  schema version), so a step reports the same whether it ran here or on a worker.

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

from handlers.attempt_runner import AttemptRunner
from handlers.effects import EffectStore, RedisGate
from handlers.execution import EffectBook
from handlers.sdk.activity_context import reset_current, set_current
from handlers.sdk.markers import has_side_effect
from orchestrator.application.app import KeelApp
from orchestrator.domain.authoring.definitions import Step
from orchestrator.domain.model.frozen_init import fast_init
from orchestrator.domain.model.messages import ActivityScheduled, CompleteActivity, FailActivity
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import TimeoutKind
from orchestrator.io.ports import Stopping, TxnAbortable
from orchestrator.trust.sealing import SealKeySource

__all__ = ["LOCAL_BOUND_MS", "LocalActivities", "LocalRun"]

log = logging.getLogger("keel.orchestrator.local")

#: The longest a local activity may hold the orchestrator's loop (and its transaction).
LOCAL_BOUND_MS = 2000


@fast_init
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
        effects: EffectBook | None = None,
        attempts: AttemptRunner | None = None,
    ) -> None:
        """``attempts``: the process's activity-attempt runner (the composition root's; by
        default one that holds no seal keys, so a sealed input is refused)."""
        self.app = app
        self.attempts = attempts or AttemptRunner(app, seal_keys=SealKeySource())
        self.redis_url = redis_url
        self.topic_prefix = topic_prefix
        self.stop = stop
        self.bound_ms = bound_ms
        self._effects = effects
        self._gate: RedisGate | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: _Runner | None = None
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
        """Run ``runs``; each one's report, or None when the timer will fail it.

        Sync handlers run one after another on one runner thread (a thread hop per
        round, not per run), each bounded from its own start; async handlers run
        concurrently on a private event loop meanwhile.
        """
        if not runs:
            return []
        began = time.perf_counter()
        out: list[CompleteActivity | FailActivity | None] = [None] * len(runs)
        jobs: list[_Job] = []
        waiting: list[tuple[int, LocalRun]] = []
        for i, r in enumerate(runs):
            handler = self.app.handler(r.scheduled.activity_type)
            if handler.is_async:
                waiting.append((i, r))
            else:
                jobs.append(_Job(i, r, self._sync_call(r, handler), r.bound_ms / 1000))
        if jobs:
            runner = self._runner_for(jobs)
        if waiting:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            reports = self._loop.run_until_complete(self._all([r for _, r in waiting]))
            for (i, _), report in zip(waiting, reports, strict=True):
                out[i] = report
        while jobs:
            done, overrun = runner.wait_round()
            for job, (ok, value) in done:
                out[job.index] = self._outcome(job.run, ok, value)
            if overrun is None:
                break
            out[overrun.index] = self._overran(overrun.run)
            jobs = jobs[jobs.index(overrun) + 1 :]  # the rest on a fresh runner
            self._runner = None
            if jobs:
                runner = self._runner_for(jobs)
        self.run_ms += (time.perf_counter() - began) * 1000
        self.runs += len(runs)
        return out

    def _runner_for(self, jobs: list[_Job]) -> _Runner:
        if self._runner is None or not self._runner.is_alive():
            self._runner = _Runner()
            self._runner.start()
        self._runner.submit(jobs)
        return self._runner

    def _sync_call(self, r: LocalRun, handler: Any) -> Callable[[], str]:
        """The run of a sync handler, with its activity context, for the runner thread."""
        s = r.scheduled
        side_effect = has_side_effect(handler.fn)
        ctx = self.attempts.context(r.workflow_id, s)
        store: tuple[EffectBook | None, RedisGate | None] | Exception = (None, None)
        if side_effect:  # opened here, on the orchestrator's thread, once
            try:
                store = self._store()
            except Exception as exc:  # reported as the run's failure
                store = exc

        def call() -> str:
            token = set_current(ctx)
            try:
                if isinstance(store, Exception):
                    raise store
                effects, gate = store
                return self.attempts.execute_sync(s, effects, gate, side_effect=side_effect)
            finally:
                reset_current(token)

        return call

    def _outcome(self, r: LocalRun, ok: bool, value: Any) -> CompleteActivity | FailActivity:
        """A run's report: its result, or its failure classified as a worker would."""
        s = r.scheduled
        if ok:
            return self.attempts.completion(s, value)
        if isinstance(value, Stopping):  # stopping while Redis is away: commit nothing
            raise TxnAbortable(f"local activity {s.activity_id} abandoned: {value}") from value
        return self.attempts.failure(s, value)

    def _overran(self, r: LocalRun) -> FailActivity | None:
        """Past its bound: None when its start-to-close timer fails it, else a failure now."""
        s = r.scheduled
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
        side_effect = has_side_effect(self.app.handler(s.activity_type).fn)
        return FailActivity(
            s.activity_id,
            s.attempt,
            "unknown" if side_effect else "transient",
            "StartToCloseTimeout",
            f"local activity exceeded its in-process bound of {r.bound_ms} ms",
        )

    async def _all(self, runs: list[LocalRun]) -> list[CompleteActivity | FailActivity | None]:
        return list(await asyncio.gather(*(self._one(r) for r in runs)))

    def _store(self) -> tuple[EffectBook, RedisGate]:
        if self._effects is None:
            if not self.redis_url:
                raise RuntimeError("a @side_effect local activity needs KEEL_REDIS_URL")
            self._effects = EffectStore.from_url(self.redis_url, self.topic_prefix)
        if self._gate is None:
            self._gate = RedisGate(self.stop)
        return self._effects, self._gate

    async def _one(self, r: LocalRun) -> CompleteActivity | FailActivity | None:
        """An async handler's run on the private loop, bounded."""
        s = r.scheduled
        side_effect = has_side_effect(self.app.handler(s.activity_type).fn)
        effects: EffectBook | None = None
        gate: RedisGate | None = None
        token = set_current(self.attempts.context(r.workflow_id, s))
        try:
            if side_effect:  # only a @side_effect handler touches the effect store
                effects, gate = self._store()
            work = self.attempts.execute(s, effects, gate)
            result = await asyncio.wait_for(work, r.bound_ms / 1000)
        except TimeoutError:
            return self._overran(r)
        except Exception as exc:
            return self._outcome(r, False, exc)
        finally:
            reset_current(token)
        return self._outcome(r, True, result)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None


@dataclass(eq=False, slots=True)
class _Job:
    index: int
    run: LocalRun
    call: Callable[[], str]
    bound_s: float


class _Runner(threading.Thread):
    """Runs rounds of sync local steps one after another, each bounded from its start.

    The orchestrator's thread waits for the whole round, waking only at the current
    step's deadline; a step past it is given up (it may still finish on this thread,
    which then exits with its result unused) and the rest of the round goes to a new
    runner.
    """

    def __init__(self) -> None:
        super().__init__(name="keel-local-activities", daemon=True)
        self._cond = threading.Condition(threading.Lock())
        self._queued: list[_Job] | None = None
        self._outcomes: list[tuple[_Job, tuple[bool, Any]]] = []
        self._running: _Job | None = None
        self._began_at = 0.0
        self._round_done = True
        self._given_up = False

    def submit(self, jobs: list[_Job]) -> None:
        with self._cond:
            self._queued, self._outcomes, self._round_done = jobs, [], False
            self._cond.notify_all()

    def run(self) -> None:
        while True:
            with self._cond:
                while self._queued is None and not self._given_up:
                    self._cond.wait()
                if self._given_up:
                    return
                jobs, self._queued = self._queued or [], None
            for job in jobs:
                with self._cond:
                    if self._given_up:
                        return
                    self._running, self._began_at = job, time.monotonic()
                try:
                    outcome: tuple[bool, Any] = (True, job.call())
                except Exception as exc:
                    outcome = (False, exc)
                with self._cond:
                    if self._given_up:  # given up while it ran: its result is not ours
                        return
                    self._outcomes.append((job, outcome))
            with self._cond:
                self._running, self._round_done = None, True
                self._cond.notify_all()

    def wait_round(self) -> tuple[list[tuple[_Job, tuple[bool, Any]]], _Job | None]:
        """The round's outcomes; and the step that overran (this runner is then closed)."""
        with self._cond:
            while not self._round_done:
                job = self._running
                if job is None:
                    self._cond.wait(0.05)
                    continue
                left = self._began_at + job.bound_s - time.monotonic()
                if left <= 0:
                    self._given_up = True
                    return list(self._outcomes), job
                self._cond.wait(left)
            return list(self._outcomes), None

    def close(self) -> None:
        with self._cond:
            self._given_up = True
            self._cond.notify_all()
