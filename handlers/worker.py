"""The activity worker: runs tasks from ``keel.tasks`` and reports each outcome as a command.

Delivery is at least once: the task offset is committed only after the outcome
command is acknowledged by Kafka. A task run twice reports twice; the orchestrator
drops the stale or duplicate report, and side effects are made safe by the
activity's idempotency key (see ``ActivityTask.idempotency_key``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel

from handlers.errors import classify
from orchestrator.app import ActivityHandler, KeelApp
from orchestrator.codec import DecodeError, default_codec
from orchestrator.domain.messages import (
    ActivityTask,
    CompleteActivity,
    DeadLetter,
    Envelope,
    FailActivity,
)
from orchestrator.runtime import tracing
from orchestrator.runtime.kafka import (
    consume_batch,
    consumer_config,
    next_offsets,
    producer_config,
)
from orchestrator.settings import Settings

log = logging.getLogger("keel.worker")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Worker:
    def __init__(self, settings: Settings, app: KeelApp, *, batch_size: int = 500) -> None:
        self.settings = settings
        self.app = app
        self.codec = default_codec()
        self.batch_size = batch_size
        self.t_tasks = settings.topic("tasks")
        self.t_commands = settings.topic("commands")
        self.t_dlq = settings.topic("dlq")
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._tracer = tracing.tracer()
        self.completed = 0
        self.failed = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        producer = Producer(producer_config(self.settings))
        consumer = Consumer(consumer_config(self.settings, f"{self.settings.topic_prefix}.workers"))
        consumer.subscribe([self.t_tasks])
        log.info("worker started on %s", self.t_tasks)
        try:
            while not self._stop.is_set():
                msgs = consume_batch(consumer, self.batch_size, 0.1)
                records = [m for m in msgs if not m.error()]
                for m in msgs:
                    if m.error() and m.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error: %s", m.error())
                if not records:
                    continue
                for msg in records:
                    self._run_one(msg, producer)
                    producer.poll(0)
                if producer.flush(60) != 0:
                    raise RuntimeError("outcome commands not acknowledged within 60s")
                consumer.commit(offsets=next_offsets(records), asynchronous=False)
        finally:
            consumer.close()
            producer.flush(10)
            self._loop.close()

    def _run_one(self, msg: Message, producer: Producer) -> None:
        try:
            task = self.codec.decode(msg.value())
        except DecodeError as exc:
            self._dead_letter(producer, msg, f"undecodable task: {exc}")
            return
        if not isinstance(task.payload, ActivityTask):
            self._dead_letter(producer, msg, f"{task.type} is not an activity task")
            return
        t: ActivityTask = task.payload
        incoming = tracing.headers_traceparent(msg.headers()) or task.traceparent
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
                payload = self._outcome(task)
                if isinstance(payload, FailActivity):
                    span.set_status(Status(StatusCode.ERROR, payload.message))
                traceparent = tracing.current_traceparent()
        else:
            payload = self._outcome(task)
            traceparent = incoming
        report: Envelope[Any] = Envelope(
            message_id=f"{task.message_id}/report/{t.attempt}",
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
        self._produce(producer, self.t_commands, task.workflow_id.encode(), report, headers)

    def _outcome(self, task: Envelope[Any]) -> CompleteActivity | FailActivity:
        """Run the task's handler and turn what happened into the report to send."""
        t: ActivityTask = task.payload
        try:
            result_json = self.execute(t)
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
        self.completed += 1
        return CompleteActivity(t.activity_id, t.attempt, result_json)

    def execute(self, t: ActivityTask) -> str:
        """Run the handler for ``t``; returns the result as JSON text or raises."""
        handler: ActivityHandler = self.app.handler(t.activity_type)
        raw = json.loads(t.input_json)
        arg = handler.input_model.model_validate(raw) if handler.input_model else raw
        result = handler.fn(arg)
        if handler.is_async:
            result = self._loop.run_until_complete(result)
        if handler.output_model is not None and not isinstance(result, handler.output_model):
            result = handler.output_model.model_validate(result)
        if isinstance(result, BaseModel):
            return result.model_dump_json()
        return json.dumps(result)

    def _produce(
        self, producer: Producer, topic: str, key: bytes, env: Envelope[Any], headers: Any = None
    ) -> None:
        value = self.codec.encode(env)
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers)
                return
            except BufferError:
                producer.poll(0.05)

    def _dead_letter(self, producer: Producer, msg: Message, reason: str) -> None:
        log.warning(
            "dead letter from %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), reason
        )
        key = msg.key()
        env: Envelope[Any] = Envelope(
            message_id=f"dlq/{msg.topic()}/{msg.partition()}/{msg.offset()}",
            workflow_id=(key or b"").decode("utf-8", "replace"),
            run_id="",
            seq=0,
            type="DeadLetter",
            recorded_at=now_ms(),
            payload=DeadLetter(
                msg.topic(), msg.partition(), msg.offset(), reason, key, msg.value()
            ),
        )
        self._produce(producer, self.t_dlq, key or b"", env)


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]
