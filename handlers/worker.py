"""The activity worker: runs tasks from ``keel.activity-tasks``, reports each outcome as a command.

Delivery is at least once: the task offsets are committed only after the outcome
commands are acknowledged by Kafka. A task run twice reports twice; the orchestrator
drops the stale or duplicate report. Each attempt runs through the process's
:class:`~handlers.attempt_runner.AttemptRunner` (its context, the handler, its report),
as a local step does; ``@side_effect`` handlers go through the effect store, so a
redelivered task never repeats a write: it returns the recorded result, or reports its
outcome as unknown so the orchestrator asks the external system (its status query).

One bad record never stops the worker (docs/activities.md, "Poison tasks"): a null,
undecodable or foreign record is dead-lettered (the dead letter drops what does not
fit); a task that cannot be run or whose result is unusable is reported as a permanent
failure; a report the broker would refuse is never produced; produce and commit errors
are logged and the batch is run again, never raised. Reports, dead letters and the settling
of their deliveries are its base's (``worker_reports.py``).

The worker talks to Kafka only through two ports (``orchestrator.io.ports``): a
``TaskIntake`` and an ``OutcomeSink``; the Kafka adapter bounds every blocking call (a
stop request is seen within a fraction of a second) and a consumer that hits a fatal
error or a stalled call is recreated. Too many resets in a window exit with status 70
for a supervisor. It writes ``<KEEL_HOME>/status/worker-<instance>.json`` and a
periodic ``health:`` log line (``worker_health.py``).

The tasks of one batch run side by side (``_run_batch`` says which stay in order): async
handlers on the worker's event loop, synchronous ones on its bounded pool of
``KEEL_WORKER_THREADS`` threads (:class:`~handlers.handler_threads.HandlerThreads`). Everything
else (effect claims, reports, heartbeats, the sink) stays on the loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections import deque
from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode

from handlers.attempt_runner import AttemptRunner
from handlers.effects import EffectStore, RedisGate
from handlers.execution import IN_DOUBT, EffectBook, SupersededAttempt, describe
from handlers.handler_threads import HandlerThreads, ThreadHandoff
from handlers.llm.environment import llm_runtimes
from handlers.sdk.activity_context import reset_current, set_current
from handlers.sdk.markers import has_side_effect
from handlers.type_limits import StartLapsed, TypeLimiter
from handlers.worker_health import worker_health_line
from handlers.worker_letters import MAX_RECORD_BYTES
from handlers.worker_reports import WorkerReports
from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES, check_json_text
from orchestrator.domain.model.messages import (
    ActivityTask,
    CompleteActivity,
    Envelope,
    FailActivity,
    HeartbeatActivity,
)
from orchestrator.io.adapter_hooks import NO_HOOKS, AdapterHooks
from orchestrator.io.ports import (
    ConsumerReset,
    DeliveryError,
    OutcomeSink,
    Record,
    Stopping,
    TaskIntake,
)
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.records.clock import SYSTEM_CLOCK, Clock
from orchestrator.runtime.exit_codes import ExitCode
from orchestrator.runtime.health import StatusFile, status_path
from orchestrator.telemetry import tracing
from orchestrator.telemetry.prometheus import ServiceMetrics
from orchestrator.trust.sealing import SealKeySource

__all__ = ["IN_DOUBT", "MAX_RECORD_BYTES", "SupersededAttempt", "Worker"]

log = logging.getLogger("keel.worker")

#: Threads for the effect store's and the type limits' Redis calls (each may block for a
#: Redis outage's backoff): as many as ``asyncio.to_thread``'s default executor has.
REDIS_THREADS = min(32, (os.cpu_count() or 1) + 4)


class Worker(WorkerReports):
    def __init__(
        self,
        settings: Settings,
        app: KeelApp,
        *,
        batch_size: int = 500,
        adapters: tuple[TaskIntake, OutcomeSink] | None = None,
        effects: EffectBook | None = None,
        status_interval_s: float | None = None,
        max_resets: int = 10,
        reset_window_s: float = 300.0,
        hard_exit_on_stall: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        hooks: AdapterHooks = NO_HOOKS,
        codec: Codec | None = None,
        attempts: AttemptRunner | None = None,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        """``hooks``: what the composition root wraps the task consumer and the LLM call
        store in (none in production; orchestrator/io/adapter_hooks.py). ``attempts``: the
        process's activity-attempt runner (by default one with ``settings``' seal keys and an
        LLM runtime on ``settings``, its call store wrapped in ``hooks``)."""
        self.settings = settings
        self.app = app
        #: Reports' recorded times, heartbeat spacing, Redis backoff and the reset window.
        self.clock = clock
        self.codec = codec or codec_for(settings)
        #: Runs each task's attempt: its context, the handler, its report.
        self.attempts = attempts or AttemptRunner(
            app, seal_keys=SealKeySource(settings), clock=clock, llm=llm_runtimes(settings, hooks)
        )
        #: Where the process counts this worker's tasks (its composition root's; none: not
        #: counted).
        self.metrics = metrics
        self.batch_size = batch_size
        self.t_activity_tasks = settings.topic("activity-tasks")
        self.t_commands = settings.topic("commands")
        self.t_dlq = settings.topic("dlq")
        self.instance_id = settings.instance_id or uuid.uuid4().hex[:12]
        if status_interval_s is None:
            status_interval_s = settings.status_interval_s
        self.status_interval_s = status_interval_s
        self.max_resets = max_resets
        self.reset_window_s = reset_window_s
        self.hard_exit_on_stall = hard_exit_on_stall
        if effects is None:  # the effect records of @side_effect handlers, in Redis
            effects = EffectStore.from_url(settings.redis, settings.topic_prefix)
        self.effects: EffectBook = effects
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self.threads = HandlerThreads(settings.worker_threads, self._loop)
        self._redis_threads = ThreadHandoff(REDIS_THREADS, self._loop, "keel-redis")
        self.redis_gate = RedisGate(self._stop, clock=clock, handoff=self._redis_threads)
        # per-type limits (docs/limits.md): a type without any never asks Redis
        self.limits = TypeLimiter.from_url(settings.redis, settings.topic_prefix, self.redis_gate)
        self._tracer = tracing.tracer()
        if adapters is None:
            adapters = self._kafka_adapters()
        intake, self.sink = adapters
        self.intake = hooks.task_intake(intake)
        self.state = "starting"
        self.assigned: set[int] = set()
        self.completed = 0
        self.failed = 0
        self.throttled = 0
        self.dead_letters = 0
        self.commits = 0
        self.commit_failures = 0
        self.reruns = 0
        self.consumer_resets = 0
        self.last_commit_at: float | None = None
        self._resets: deque[float] = deque()
        # Reports of the current batch that Kafka refused: (task record, error).
        self._undelivered: list[tuple[Record, DeliveryError]] = []

    def _kafka_adapters(self) -> tuple[TaskIntake, OutcomeSink]:
        from orchestrator.io.kafka.adapter import KafkaGroupIntake
        from orchestrator.io.kafka.outcomes import KafkaOutcomeSink

        intake = KafkaGroupIntake(
            self.settings,
            self.t_activity_tasks,
            f"{self.settings.topic_prefix}.workers",
            stopping=self._stop.is_set,
        )
        return intake, KafkaOutcomeSink(self.settings, stopping=self._stop.is_set)

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ the loop
    def subscribe(self) -> None:
        self.intake.subscribe(self._on_assign, self._on_revoke)

    def _on_assign(self, partitions: list[int]) -> None:
        self.assigned.update(partitions)

    def _on_revoke(self, partitions: list[int]) -> None:
        self.assigned.difference_update(partitions)

    def run(self) -> None:
        status = StatusFile(
            status_path(self.settings.home, "worker", self.instance_id),
            self.health,
            interval_s=self.status_interval_s,
            log_line=worker_health_line,
        )
        # The worker's only threads are its clients' helpers, replaced when a call
        # stalls: their health is ``stalled_calls``, not a dead thread.
        status.watched = {}
        self.sink.warm()
        self.subscribe()
        log.info("worker %s started on %s", self.instance_id, self.t_activity_tasks)
        self.state = "running"
        try:
            while not self._stop.is_set():
                try:
                    if not self.step():
                        log.info("stopping mid-batch: the rest of the batch will be redelivered")
                        break
                except Stopping:
                    break
                status.maybe_write()
        finally:
            self.state = "stopped"
            status.maybe_write(force=True)
            self._close()
            log.info("worker %s stopped", self.instance_id)
        if self.hard_exit_on_stall and self._stalled_calls():
            # A Kafka call was abandoned mid-flight: its client may block interpreter
            # exit while destroying itself. The log is flushed; leave now.
            logging.shutdown()
            os._exit(ExitCode.OK if self._stop.is_set() else ExitCode.RESTART)

    def step(self) -> bool:
        """One poll, and the batch it brought run, reported and committed (or rewound).

        False when the worker stopped mid-batch (Redis away, or the producer's queue full):
        nothing of it is committed.
        """
        try:
            records = self.intake.poll(self.batch_size, 0.1)
        except ConsumerReset as exc:
            self._recreate_consumer(exc)
            return True
        if not records:
            self.sink.poll()
            return True
        finished = self._loop.run_until_complete(self._run_batch(records))
        if not finished:
            return False
        if self._settle_deliveries():
            self._commit(records)
        else:
            self.reruns += 1
            self._rewind(records)
        return True

    def _close(self) -> None:
        closer = threading.Thread(target=self.intake.close, name="keel-close", daemon=True)
        closer.start()
        closer.join(10)
        try:
            self.sink.close()
        except Exception as exc:
            log.warning("closing the producer: %s", exc)
        # a handler or an effect record's write still running is never cut off by the exit
        self.threads.close(wait=True)
        self._redis_threads.close(wait=True)
        self._loop.close()

    def _recreate_consumer(self, exc: Exception) -> None:
        """A fatal consumer error or a stalled call: join the group again with a new one."""
        self.consumer_resets += 1
        now = self.clock.monotonic()
        self._resets.append(now)
        while self._resets and now - self._resets[0] > self.reset_window_s:
            self._resets.popleft()
        if len(self._resets) > self.max_resets:
            log.critical(
                "%d consumer resets within %.0fs; exiting for the supervisor to restart: %s",
                len(self._resets),
                self.reset_window_s,
                exc,
            )
            raise SystemExit(ExitCode.RESTART) from exc
        log.warning("the task consumer is unusable (%s); joining the group again", exc)
        self.intake.recreate()

    async def _run_batch(self, records: list[Record]) -> bool:
        """Activities run concurrently; the tasks of one activity run in log order.

        In order, an older attempt still queued behind a crash finishes (or is fenced)
        before a newer attempt of the same activity starts: never two at once; and its
        status query (``<id>/query/<n>``) or compensation (``<id>/undo``) never runs beside
        an attempt queued before it, so a query cannot answer "not found" for a write that
        is about to happen. The activities of one workflow (parallel steps, a fan-out's
        items) run side by side. False when the worker stopped mid-batch (Redis away):
        nothing of it may be committed.
        """
        by_activity: dict[tuple[bytes | None, str], list[tuple[Record, Envelope[Any] | None]]]
        by_activity = {}
        for rec in records:
            task = self._decoded(rec)
            aid = task.payload.activity_id if task is not None else ""
            base = "/".join(aid.split("/", 2)[:2])  # <state>#<visit>/<step>: no "/" inside
            by_activity.setdefault((rec.key, base), []).append((rec, task))

        async def in_order(recs: list[tuple[Record, Envelope[Any] | None]]) -> bool:
            for rec, task in recs:
                if not await self._run_one(rec, task):
                    return False
            return True

        results = await asyncio.gather(*(in_order(recs) for recs in by_activity.values()))
        return all(results)

    def _commit(self, records: list[Record]) -> None:
        offsets: dict[int, int] = {}
        for rec in records:
            offsets[rec.partition] = rec.offset + 1
        try:
            self.intake.commit(offsets)
        except ConsumerReset as exc:
            self.commit_failures += 1
            log.warning("task offsets not committed (%s); the batch may run again", exc)
            self._recreate_consumer(exc)
            return
        except UnavailableError as exc:  # e.g. a rebalance: the batch is redelivered
            self.commit_failures += 1
            log.warning("task offsets not committed (%s); the batch may run again", exc)
            return
        self.commits += 1
        self.last_commit_at = time.time()

    def _rewind(self, records: list[Record]) -> None:
        first: dict[int, int] = {}
        for rec in records:
            first.setdefault(rec.partition, rec.offset)
        for partition, offset in first.items():
            try:
                self.intake.rewind(partition, offset)
            except Exception as exc:  # no longer assigned: its new owner reruns it
                log.info("not rewinding %s[%d]: %s", self.t_activity_tasks, partition, exc)

    # ------------------------------------------------------------------ health
    def _stalled_calls(self) -> int:
        return int(getattr(self.intake, "stalled_calls", 0)) + int(
            getattr(self.sink, "stalled_calls", 0)
        )

    def health(self) -> dict[str, Any]:
        """What the status file reports: Kafka state, Redis gate, progress."""
        gate = self.redis_gate
        return {
            "role": "worker",
            "topic_prefix": self.settings.topic_prefix,
            "instance_id": self.instance_id,
            "pid": os.getpid(),
            "state": self.state,
            "updated_at": time.time(),
            "assigned_partitions": sorted(self.assigned),
            "last_commit_age_s": (
                round(time.time() - self.last_commit_at, 3) if self.last_commit_at else None
            ),
            "commits": self.commits,
            "commit_failures": self.commit_failures,
            "reruns": self.reruns,
            "consumer_errors": int(getattr(self.intake, "coordinator_errors", 0)),
            "consumer_resets": self.consumer_resets,
            "stalled_calls": self._stalled_calls(),
            "last_broker_error": str(getattr(self.intake, "last_error", "")),
            "redis": {
                "down": gate.is_down,
                "down_for_s": (
                    round(self.clock.monotonic() - gate.down_since, 3)
                    if gate.down_since is not None
                    else None
                ),
                "outages": gate.outages,
            },
            "completed": self.completed,
            "failed": self.failed,
            "throttled": self.throttled,
            "dead_letters": self.dead_letters,
        }

    # ------------------------------------------------------------------ one task
    def _decoded(self, rec: Record) -> Envelope[Any] | None:
        """The record's task, or None when it is not one (``_handle`` says why)."""
        if rec.value is None:
            return None
        try:
            task = self.codec.decode(rec.value)
        except Exception:  # DecodeError, or anything a hostile record provokes
            return None
        return task if isinstance(task.payload, ActivityTask) else None

    async def _run_one(self, rec: Record, task: Envelope[Any] | None = None) -> bool:
        """Run one record and report; False only when abandoned because of a stop (the
        Redis gate's, or the sink's while its queue is full): never a dead letter."""
        try:
            await self._handle(rec, task)
        except Stopping:
            return False
        except Exception as exc:  # one record must never stop the worker
            log.exception("task %s[%d]@%d broke the worker", rec.topic, rec.partition, rec.offset)
            self._dead_letter(
                rec, f"worker error on this task: {type(exc).__name__}: {describe(exc)}"
            )
        return True

    async def _handle(self, rec: Record, decoded: Envelope[Any] | None = None) -> None:
        value = rec.value
        if value is None:
            self._dead_letter(rec, "task record has no value (null)")
            return
        try:
            task = decoded if decoded is not None else self.codec.decode(value)
        except Exception as exc:  # DecodeError, or anything a hostile record provokes
            self._dead_letter(rec, f"undecodable task: {describe(exc)}")
            return
        if not isinstance(task.payload, ActivityTask):
            self._dead_letter(rec, f"{task.type} is not an activity task", task)
            return
        t: ActivityTask = task.payload
        incoming = rec.header("traceparent") or task.traceparent
        began = self.clock.monotonic()
        if tracing.enabled():
            with self._tracer.start_as_current_span(
                f"keel.activity {t.activity_type}",
                context=tracing.extract(incoming),
                kind=SpanKind.CONSUMER,
                attributes={
                    "keel.workflow_id": task.workflow_id,
                    "keel.activity_id": t.activity_id,
                    "keel.attempt": t.attempt,
                },
            ) as span:
                payload = await self._outcome(rec, task)
                if isinstance(payload, FailActivity):
                    span.set_status(Status(StatusCode.ERROR, payload.message))
                traceparent = tracing.current_traceparent()
        else:
            payload = await self._outcome(rec, task)
            traceparent = incoming
        if self.metrics is not None:
            self.metrics.worker.task_done(t.activity_type, payload, self.clock.monotonic() - began)
        mid = f"{task.message_id}/report/{t.attempt}"
        problem = self._report(rec, task, payload, mid, traceparent)
        if problem is not None:
            reason = f"the report of this task could not be produced: {problem}"
            self._dead_letter(rec, reason, task)

    async def _outcome(self, rec: Record, task: Envelope[Any]) -> CompleteActivity | FailActivity:
        """Run the task's handler and turn what happened into the report to send.

        A sync handler's task waits for a thread of the pool first, before it is admitted,
        reports its start or claims its effect: until then it has not started.
        """
        handler = self.app.handlers.get(task.payload.activity_type)
        if handler is None or handler.is_async:
            return await self._attempt(rec, task)
        async with self.threads.slot():
            return await self._attempt(rec, task)

    async def _attempt(self, rec: Record, task: Envelope[Any]) -> CompleteActivity | FailActivity:
        t: ActivityTask = task.payload
        beats = 0
        # a side effect reports its start (its claim): a later timeout leaves it unknown
        handler = self.app.handlers.get(t.activity_type)
        side = handler is not None and has_side_effect(handler.fn)

        def send_heartbeat(details_json: str) -> None:
            nonlocal beats
            beats += 1
            try:
                check_json_text(details_json, "heartbeat details", MAX_PAYLOAD_BYTES)
            except ValueError as exc:
                log.warning("heartbeat details of %s dropped: %s", t.activity_id, exc)
                details_json = "null"
            beat = HeartbeatActivity(t.activity_id, t.attempt, details_json, side)
            self._report(rec, task, beat, f"{task.message_id}/beat/{t.attempt}/{beats}", None)
            self.sink.poll()

        ctx = self.attempts.context(
            task.workflow_id,
            t,
            heartbeat_ms=t.heartbeat_ms,
            send=self.threads.on_loop(send_heartbeat),
        )
        # over a per-type limit: reported throttled, never waited for inside the batch
        admission = await self.limits.admit(self.app, t)
        if admission.wait_ms is not None:
            self.throttled += 1
            return admission.report(t)

        async def confirm() -> None:  # the grant may have lapsed on its way to the call
            nonlocal admission
            admission = await self.limits.confirm(self.app, t, admission)
            if t.report_start and not side:  # a side effect's start: once it has its claim
                ctx.heartbeat(None, force=True)

        token = set_current(ctx)
        try:
            outcome = await self.attempts.run(
                t,
                self.effects,
                self.redis_gate,
                threads=self.threads,
                on_start=lambda: ctx.heartbeat(None, force=True),
                before_call=confirm,
            )
        except StartLapsed as lapsed:  # the handler was not called
            self.throttled += 1
            return lapsed.admission.report(t)
        finally:
            reset_current(token)
            await self.limits.release(admission)
        if isinstance(outcome, FailActivity):
            self.failed += 1
            log.info(
                "activity %s of %s failed (%s): %s",
                t.activity_id,
                task.workflow_id,
                outcome.failure_class,
                outcome.message,
            )
        else:
            self.completed += 1
        return outcome
