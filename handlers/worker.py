"""The activity worker: runs tasks from ``keel.tasks`` and reports each outcome as a command.

Delivery is at least once: the task offsets are committed only after the outcome
commands are acknowledged by Kafka. A task run twice reports twice; the orchestrator
drops the stale or duplicate report. Handlers marked ``@side_effect`` go through the
effect store (``handlers.effects``), so a redelivered task never repeats a write: it
returns the recorded result, or reports its outcome as unknown so the orchestrator
asks the external system (the activity's status query) first.

The async handlers of one batch run concurrently on the worker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

from confluent_kafka import Consumer, Message, Producer
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel, ValidationError

from handlers.context import ActivityContext, reset_current, set_current
from handlers.effects import EffectStore, has_side_effect
from handlers.errors import classify
from orchestrator.app import ActivityHandler, KeelApp
from orchestrator.codec import DecodeError, default_codec
from orchestrator.definitions import format_validation_error
from orchestrator.domain.messages import (
    ActivityTask,
    CompleteActivity,
    Envelope,
    FailActivity,
    HeartbeatActivity,
)
from orchestrator.runtime import tracing
from orchestrator.runtime.kafka import (
    consumer_config,
    dead_letter,
    header,
    next_offsets,
    now_ms,
    poll_records,
    producer_config,
)
from orchestrator.settings import Settings

log = logging.getLogger("keel.worker")

IN_DOUBT = (
    "attempt {attempt} was dispatched before and never reported (worker crash?); "
    "its outcome is unknown"
)


class Worker:
    def __init__(self, settings: Settings, app: KeelApp, *, batch_size: int = 500) -> None:
        self.settings = settings
        self.app = app
        self.codec = default_codec()
        self.batch_size = batch_size
        self.t_tasks = settings.topic("tasks")
        self.t_commands = settings.topic("commands")
        self.t_dlq = settings.topic("dlq")
        self.effects = EffectStore.from_url(settings.redis, settings.topic_prefix)
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._tracer = tracing.tracer()
        self.producer: Producer | None = None
        self.completed = 0
        self.failed = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        self.producer = Producer(producer_config(self.settings))
        consumer = Consumer(consumer_config(self.settings, f"{self.settings.topic_prefix}.workers"))
        consumer.subscribe([self.t_tasks])
        log.info("worker started on %s", self.t_tasks)
        try:
            while not self._stop.is_set():
                records = poll_records(consumer, self.batch_size, 0.1)
                if not records:
                    continue
                self._loop.run_until_complete(self._run_batch(records))
                if self.producer.flush(60) != 0:
                    raise RuntimeError("outcome commands not acknowledged within 60s")
                consumer.commit(offsets=next_offsets(records), asynchronous=False)
        finally:
            consumer.close()
            self.producer.flush(10)
            self._loop.close()

    async def _run_batch(self, records: list[Message]) -> None:
        """Workflows run concurrently; the tasks of one workflow run in log order.

        In order, an older attempt still queued behind a crash finishes (or is fenced)
        before a newer attempt of the same activity starts: never two at once.
        """
        by_workflow: dict[bytes | None, list[Message]] = {}
        for msg in records:
            by_workflow.setdefault(msg.key(), []).append(msg)

        async def in_order(msgs: list[Message]) -> None:
            for msg in msgs:
                await self._run_one(msg)

        await asyncio.gather(*(in_order(msgs) for msgs in by_workflow.values()))

    async def _run_one(self, msg: Message) -> None:
        try:
            task = self.codec.decode(msg.value())
        except DecodeError as exc:
            self._dead_letter(msg, f"undecodable task: {exc}")
            return
        if not isinstance(task.payload, ActivityTask):
            self._dead_letter(msg, f"{task.type} is not an activity task")
            return
        t: ActivityTask = task.payload
        incoming = header(msg, "traceparent") or task.traceparent
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
                payload = await self._outcome(task)
                if isinstance(payload, FailActivity):
                    span.set_status(Status(StatusCode.ERROR, payload.message))
                traceparent = tracing.current_traceparent()
        else:
            payload = await self._outcome(task)
            traceparent = incoming
        self._report(task, payload, f"{task.message_id}/report/{t.attempt}", traceparent)

    def _report(
        self, task: Envelope[Any], payload: Any, message_id: str, traceparent: str | None
    ) -> None:
        report: Envelope[Any] = Envelope(
            message_id=message_id,
            workflow_id=task.workflow_id,
            run_id=task.run_id,
            seq=0,
            type=type(payload).__name__,
            recorded_at=now_ms(),
            payload=payload,
            causation_id=task.message_id,
            correlation_id=task.correlation_id,
            traceparent=traceparent,
        )
        headers = [("traceparent", traceparent.encode())] if traceparent else None
        self._produce(self.t_commands, task.workflow_id.encode(), report, headers)

    async def _outcome(self, task: Envelope[Any]) -> CompleteActivity | FailActivity:
        """Run the task's handler and turn what happened into the report to send."""
        t: ActivityTask = task.payload
        beats = 0

        def send_heartbeat(details_json: str) -> None:
            nonlocal beats
            beats += 1
            beat = HeartbeatActivity(t.activity_id, t.attempt, details_json)
            self._report(task, beat, f"{task.message_id}/beat/{t.attempt}/{beats}", None)
            self.producer.poll(0)  # type: ignore[union-attr]

        ctx = ActivityContext(
            workflow_id=task.workflow_id,
            activity_id=t.activity_id,
            activity_type=t.activity_type,
            attempt=t.attempt,
            logical_attempt=t.logical_attempt,
            idempotency_key=t.idempotency_key,
            heartbeat_ms=t.heartbeat_ms,
            _send=send_heartbeat,
        )
        token = set_current(ctx)
        try:
            if t.report_start:
                ctx.heartbeat(None, force=True)
            result_json = await self._execute(t)
        except Exception as exc:
            failure_class = classify(exc)
            self.failed += 1
            message = _message(exc)
            log.info(
                "activity %s of %s failed (%s): %s",
                t.activity_id,
                task.workflow_id,
                failure_class,
                message,
            )
            return FailActivity(
                t.activity_id, t.attempt, failure_class, type(exc).__name__, message
            )
        finally:
            reset_current(token)
        self.completed += 1
        return CompleteActivity(t.activity_id, t.attempt, result_json)

    async def _execute(self, t: ActivityTask) -> str:
        """Run the handler for ``t`` (through the effect store for side effects)."""
        handler: ActivityHandler = self.app.handler(t.activity_type)
        if not has_side_effect(handler.fn):
            return await self._call(handler, t)
        claim = self.effects.begin(t.idempotency_key, t.attempt)
        if claim.outcome == "committed":
            assert claim.result_json is not None
            return claim.result_json
        if claim.outcome == "stale":
            raise SupersededAttempt(f"attempt {t.attempt} was superseded by a later attempt")
        if claim.outcome == "in_doubt":
            from handlers.errors import OutcomeUnknownError

            raise OutcomeUnknownError(IN_DOUBT.format(attempt=t.attempt))
        try:
            result_json = await self._call(handler, t)
        except Exception as exc:
            if classify(exc) != "unknown":  # a definite failure: nothing was written
                self.effects.release(t.idempotency_key)
            raise
        self.effects.commit(t.idempotency_key, result_json)
        return result_json

    @staticmethod
    async def _call(handler: ActivityHandler, t: ActivityTask) -> str:
        raw = json.loads(t.input_json)
        arg = handler.input_model.model_validate(raw) if handler.input_model else raw
        result = handler.fn(arg)
        if handler.is_async:
            result = await result
        if handler.output_model is not None and not isinstance(result, handler.output_model):
            result = handler.output_model.model_validate(result)
        if isinstance(result, BaseModel):
            return result.model_dump_json()
        return json.dumps(result)

    def _produce(self, topic: str, key: bytes, env: Envelope[Any], headers: Any = None) -> None:
        assert self.producer is not None
        value = self.codec.encode(env)
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=headers)
                return
            except BufferError:
                self.producer.poll(0.05)

    def _dead_letter(self, msg: Message, reason: str) -> None:
        log.warning(
            "dead letter from %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), reason
        )
        self._produce(self.t_dlq, msg.key() or b"", dead_letter(msg, reason))


class SupersededAttempt(Exception):
    """An old attempt whose activity has moved on: it must not run (its report is ignored)."""


def _message(exc: BaseException) -> str:
    """One line for the failure record; a schema error names every offending field."""
    if isinstance(exc, ValidationError):
        return f"invalid {exc.title}: {format_validation_error(exc)}"[:500]
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]
