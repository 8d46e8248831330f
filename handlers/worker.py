"""The activity worker: runs tasks from ``keel.tasks`` and reports each outcome as a command.

Delivery is at least once: the task offsets are committed only after the outcome
commands are acknowledged by Kafka. A task run twice reports twice; the orchestrator
drops the stale or duplicate report. Handlers marked ``@side_effect`` go through the
effect store (``handlers.effects``, run by ``handlers.execution``), so a redelivered
task never repeats a write: it returns the recorded result, or reports its outcome as
unknown so the orchestrator asks the external system (the activity's status query).

One bad record never stops the worker (docs/activities.md, "Poison tasks"): a null,
undecodable or foreign record is dead-lettered (the dead letter drops what does not
fit); a task that cannot be run or whose result is unusable is reported as a permanent
failure; a report the broker would refuse is never produced; produce and commit errors
are logged and the batch is run again, never raised.

The async handlers of one batch run concurrently on the worker's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from opentelemetry.trace import SpanKind, Status, StatusCode

from handlers.context import ActivityContext, reset_current, set_current
from handlers.effects import EffectStore, RedisGate, Stopping
from handlers.errors import classify, error_type
from handlers.execution import IN_DOUBT, SupersededAttempt, describe, execute
from orchestrator.app import KeelApp
from orchestrator.codec import default_codec
from orchestrator.domain.limits import MAX_PAYLOAD_BYTES, MAX_REASON_CHARS, check_json_text
from orchestrator.domain.messages import (
    ActivityTask,
    CompleteActivity,
    DeadLetter,
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

__all__ = ["IN_DOUBT", "MAX_RECORD_BYTES", "SupersededAttempt", "Worker"]

log = logging.getLogger("keel.worker")

#: The largest record the worker produces (the producer's default ``message.max.bytes``;
#: brokers accept 1 MiB by default). Anything larger is replaced, never sent.
MAX_RECORD_BYTES = 1_000_000
#: Room kept for the dead letter's own fields when it wraps a record.
_DEAD_LETTER_OVERHEAD = 16 * 1024
#: A record key longer than this is cut in dead letters (keys are workflow ids).
_MAX_KEY_BYTES = 4096


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
        self.redis_gate = RedisGate(self._stop)
        self._loop = asyncio.new_event_loop()
        self._tracer = tracing.tracer()
        self.producer: Producer | None = None
        self.completed = 0
        self.failed = 0
        self.dead_letters = 0
        # Reports of the current batch that Kafka refused: (task record, error).
        self._undelivered: list[tuple[Message, KafkaError]] = []

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        self.producer = Producer(producer_config(self.settings))
        consumer = Consumer(consumer_config(self.settings, f"{self.settings.topic_prefix}.workers"))
        consumer.subscribe([self.t_tasks])
        log.info("worker started on %s", self.t_tasks)
        try:
            while not self._stop.is_set():
                records = poll_records(consumer, self.batch_size, 0.1)
                if not records:
                    self.producer.poll(0)
                    continue
                finished = self._loop.run_until_complete(self._run_batch(records))
                if not finished:
                    log.info(
                        "stopping while Redis is away: the rest of the batch will be redelivered"
                    )
                    break
                if self._settle_deliveries():
                    self._commit(consumer, records)
                else:
                    self._rewind(consumer, records)
        finally:
            consumer.close()
            self.producer.flush(10)
            self._loop.close()

    async def _run_batch(self, records: list[Message]) -> bool:
        """Workflows run concurrently; the tasks of one workflow run in log order.

        In order, an older attempt still queued behind a crash finishes (or is fenced)
        before a newer attempt of the same activity starts: never two at once. False
        when the worker stopped mid-batch (Redis away): nothing of it may be committed.
        """
        by_workflow: dict[bytes | None, list[Message]] = {}
        for msg in records:
            by_workflow.setdefault(msg.key(), []).append(msg)

        async def in_order(msgs: list[Message]) -> bool:
            for msg in msgs:
                if not await self._run_one(msg):
                    return False
            return True

        results = await asyncio.gather(*(in_order(msgs) for msgs in by_workflow.values()))
        return all(results)

    def _settle_deliveries(self) -> bool:
        """Wait for the batch's records; True when the task offsets may be committed.

        A record the broker refused for good (too large, invalid) has its task
        dead-lettered instead; a retriable failure or a timeout reruns the batch.
        """
        assert self.producer is not None
        remaining = self.producer.flush(60)
        failures, self._undelivered = self._undelivered, []
        retry = remaining > 0
        for task_msg, err in failures:
            if err.retriable() or err.code() == KafkaError._MSG_TIMED_OUT:
                retry = True
            else:
                self._dead_letter(task_msg, f"the report of this task was refused by Kafka: {err}")
        if retry:
            log.warning(
                "%d record(s) not acknowledged (%s); the batch runs again",
                remaining + len(failures),
                "; ".join(sorted({str(e) for _, e in failures})) or "timed out",
            )
            return False
        if failures:
            self.producer.flush(60)
        return True

    @staticmethod
    def _commit(consumer: Consumer, records: list[Message]) -> None:
        try:
            consumer.commit(offsets=next_offsets(records), asynchronous=False)
        except KafkaException as exc:  # e.g. a rebalance: the batch is redelivered
            log.warning("task offsets not committed (%s); the batch may run again", exc)

    @staticmethod
    def _rewind(consumer: Consumer, records: list[Message]) -> None:
        first: dict[tuple[str, int], int] = {}
        for m in records:
            first.setdefault((m.topic() or "", m.partition() or 0), m.offset() or 0)
        for (topic, partition), offset in first.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:  # no longer assigned: its new owner reruns it
                log.info("not rewinding %s[%d]: %s", topic, partition, exc)

    # ------------------------------------------------------------------ one task
    async def _run_one(self, msg: Message) -> bool:
        """Run one record and report; False only when abandoned because of a stop."""
        try:
            await self._handle(msg)
        except Stopping:
            return False
        except Exception as exc:  # one record must never stop the worker
            log.exception(
                "task %s[%d]@%d broke the worker", msg.topic(), msg.partition(), msg.offset()
            )
            self._dead_letter(
                msg, f"worker error on this task: {type(exc).__name__}: {describe(exc)}"
            )
        return True

    async def _handle(self, msg: Message) -> None:
        value = msg.value()
        if value is None:
            self._dead_letter(msg, "task record has no value (null)")
            return
        try:
            task = self.codec.decode(value)
        except Exception as exc:  # DecodeError, or anything a hostile record provokes
            self._dead_letter(msg, f"undecodable task: {describe(exc)}")
            return
        if not isinstance(task.payload, ActivityTask):
            self._dead_letter(msg, f"{task.type} is not an activity task", task)
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
                payload = await self._outcome(msg, task)
                if isinstance(payload, FailActivity):
                    span.set_status(Status(StatusCode.ERROR, payload.message))
                traceparent = tracing.current_traceparent()
        else:
            payload = await self._outcome(msg, task)
            traceparent = incoming
        mid = f"{task.message_id}/report/{t.attempt}"
        problem = self._report(msg, task, payload, mid, traceparent)
        if problem is not None:
            reason = f"the report of this task could not be produced: {problem}"
            self._dead_letter(msg, reason, task)

    async def _outcome(self, msg: Message, task: Envelope[Any]) -> CompleteActivity | FailActivity:
        """Run the task's handler and turn what happened into the report to send."""
        t: ActivityTask = task.payload
        beats = 0

        def send_heartbeat(details_json: str) -> None:
            nonlocal beats
            beats += 1
            try:
                check_json_text(details_json, "heartbeat details", MAX_PAYLOAD_BYTES)
            except ValueError as exc:
                log.warning("heartbeat details of %s dropped: %s", t.activity_id, exc)
                details_json = "null"
            beat = HeartbeatActivity(t.activity_id, t.attempt, details_json)
            self._report(msg, task, beat, f"{task.message_id}/beat/{t.attempt}/{beats}", None)
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
            result_json = await execute(
                self.app,
                self.effects,
                self.redis_gate,
                t.activity_type,
                t.input_json,
                t.idempotency_key,
                t.attempt,
            )
        except Stopping:
            raise
        except Exception as exc:
            failure_class = classify(exc)
            self.failed += 1
            message = describe(exc)
            log.info(
                "activity %s of %s failed (%s): %s",
                t.activity_id,
                task.workflow_id,
                failure_class,
                message,
            )
            return FailActivity(
                t.activity_id, t.attempt, str(failure_class), error_type(exc), message
            )
        finally:
            reset_current(token)
        self.completed += 1
        return CompleteActivity(t.activity_id, t.attempt, result_json)

    # ------------------------------------------------------------------ producing
    def _report(
        self,
        msg: Message,
        task: Envelope[Any],
        payload: Any,
        message_id: str,
        traceparent: str | None,
    ) -> str | None:
        """Produce one report for ``msg``'s task; the problem when it cannot be produced."""
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
        key = task.workflow_id.encode()
        value = self.codec.encode(report)
        size = len(value) + len(key)
        if size > MAX_RECORD_BYTES:
            limit = f"{MAX_RECORD_BYTES:,}-byte record limit"
            problem = f"{report.type} of {size:,} bytes is over the {limit}"
            log.error("%s: not produced", problem)
            return problem
        return self._produce(self.t_commands, key, value, headers, msg)

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Any = None,
        source: Message | None = None,
    ) -> str | None:
        """Hand one record to the producer; the problem (logged) when the client refuses it."""
        assert self.producer is not None

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                return
            if source is None:  # a dead letter: nothing to run again, say so loudly
                log.error("a record to %s was not delivered: %s", topic, err)
            else:
                self._undelivered.append((source, err))

        while True:
            try:
                self.producer.produce(
                    topic, value=value, key=key, headers=headers, on_delivery=delivered
                )
                return None
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException as exc:  # e.g. MSG_SIZE_TOO_LARGE: never fatal
                problem = f"Kafka refused a record of {len(value):,} bytes to {topic}: {exc}"
                log.error("%s", problem)
                return problem

    def _dead_letter(self, msg: Message, reason: str, env: Envelope[Any] | None = None) -> None:
        """Send ``msg`` to keel.dlq with ``reason``; what does not fit is dropped, noted."""
        self.dead_letters += 1
        log.warning(
            "dead letter from %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), reason
        )
        try:
            letter = bounded_dead_letter(msg, reason, env)
            d: DeadLetter = letter.payload
            problem = self._produce(self.t_dlq, d.key, self.codec.encode(letter))
        except Exception as exc:  # the last resort must not raise either
            problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            log.error("the dead letter was not produced (%s); the task is skipped", problem)


def bounded_dead_letter(
    msg: Message, reason: str, env: Envelope[Any] | None = None
) -> Envelope[Any]:
    """``dead_letter(msg, reason)`` cut to fit one record: an oversized value is not kept.

    The original record stays in its topic at the offset the letter names (until the
    topic's retention), so nothing is lost that an operator cannot find.
    """
    letter = dead_letter(msg, reason[:MAX_REASON_CHARS], env)
    d: DeadLetter = letter.payload
    key = d.key if d.key is None or len(d.key) <= _MAX_KEY_BYTES else d.key[:_MAX_KEY_BYTES]
    value = d.value
    room = MAX_RECORD_BYTES - _DEAD_LETTER_OVERHEAD - 2 * len(key or b"")
    if value is not None and len(value) > room:
        note = (
            f" [the {len(value):,}-byte record is too large to keep here; it stays at "
            f"{d.source_topic}[{d.source_partition}]@{d.source_offset}]"
        )
        reason = reason[: MAX_REASON_CHARS - len(note)] + note
        value = None
    payload = dataclasses.replace(d, key=key, value=value, reason=reason[:MAX_REASON_CHARS])
    return dataclasses.replace(
        letter,
        workflow_id=letter.workflow_id[:_MAX_KEY_BYTES],
        run_id=letter.run_id[:_MAX_KEY_BYTES],
        causation_id=letter.causation_id and letter.causation_id[:_MAX_KEY_BYTES],
        payload=payload,
    )
