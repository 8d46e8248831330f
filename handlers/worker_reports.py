"""What a worker produces for a batch: each task's report (and heartbeats) to
``keel.commands``, the dead letters of tasks it cannot run or report to ``keel.dlq``, and
the settling of their deliveries before the batch's task offsets are committed.

A report the broker would refuse is never produced (``MAX_RECORD_BYTES``); one it refuses
for good has its task dead-lettered instead; a retriable failure or a timeout reruns the
batch (docs/activities.md, "Poison tasks").

:class:`WorkerReports` is the base of :class:`~handlers.worker.Worker`: the batch loop and
each task's run send through it, and it calls none of them back, using only the attributes
it declares (the worker sets them).
"""

from __future__ import annotations

import logging
from typing import Any

from handlers.worker_letters import MAX_RECORD_BYTES, bounded_dead_letter
from orchestrator.domain.model.messages import DeadLetter, Envelope
from orchestrator.io.ports import DeliveryError, OutcomeSink, Record, RecordRefused
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.clock import Clock
from orchestrator.records.envelopes import report_envelope

__all__ = ["FLUSH_TIMEOUT_S", "WorkerReports"]

log = logging.getLogger("keel.worker")

#: How long the worker waits for a batch's reports to be acknowledged.
FLUSH_TIMEOUT_S = 60.0


class WorkerReports:
    """A worker's reports and dead letters, sent, and their deliveries settled per batch."""

    # set by the worker (``Worker.__init__``)
    clock: Clock
    codec: Codec
    sink: OutcomeSink
    t_commands: str
    t_dlq: str
    dead_letters: int
    _undelivered: list[tuple[Record, DeliveryError]]

    def _report(
        self,
        rec: Record,
        task: Envelope[Any],
        payload: Any,
        message_id: str,
        traceparent: str | None,
    ) -> str | None:
        """Send one report for ``rec``'s task; the problem when it cannot be produced."""
        report = report_envelope(task, message_id, payload, self.clock.now_ms(), traceparent)
        headers = [("traceparent", traceparent.encode())] if traceparent else []
        key = task.workflow_id.encode()
        value = self.codec.encode(report)
        size = len(value) + len(key)
        if size > MAX_RECORD_BYTES:
            limit = f"{MAX_RECORD_BYTES:,}-byte record limit"
            problem = f"{report.type} of {size:,} bytes is over the {limit}"
            log.error("%s: not produced", problem)
            return problem
        return self._send(self.t_commands, key, value, headers, rec)

    def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]] | None = None,
        source: Record | None = None,
    ) -> str | None:
        """Hand one record to the sink; the problem (logged) when the client refuses it.

        A report (``source`` given) that fails later is noted for the batch to settle;
        a dead letter that fails is logged by the sink: nothing can run it again.
        """

        def failed(err: DeliveryError, rec: Record | None = source) -> None:
            assert rec is not None
            self._undelivered.append((rec, err))

        try:
            self.sink.send(
                topic,
                value,
                key,
                headers=headers or (),
                on_failed=failed if source is not None else None,
            )
        except RecordRefused as exc:  # e.g. MSG_SIZE_TOO_LARGE: never fatal
            log.error("%s", exc)
            return str(exc)
        return None

    def _dead_letter(self, rec: Record, reason: str, env: Envelope[Any] | None = None) -> None:
        """Send ``rec`` to keel.dlq with ``reason``; what does not fit is dropped, noted."""
        self.dead_letters += 1
        log.warning("dead letter from %s[%d]@%d: %s", rec.topic, rec.partition, rec.offset, reason)
        try:
            letter = bounded_dead_letter(rec, reason, env, self.clock.now_ms())
            d: DeadLetter = letter.payload
            problem = self._send(self.t_dlq, d.key, self.codec.encode(letter))
        except Exception as exc:  # the last resort must not raise either
            problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            log.error("the dead letter was not produced (%s); the task is skipped", problem)

    def _settle_deliveries(self) -> bool:
        """Wait for the batch's records; True when the task offsets may be committed.

        A record the broker refused for good (too large, invalid) has its task
        dead-lettered instead; a retriable failure or a timeout reruns the batch.
        """
        remaining = self.sink.flush(FLUSH_TIMEOUT_S)
        failures, self._undelivered = self._undelivered, []
        retry = remaining > 0
        for rec, err in failures:
            if err.retriable:
                retry = True
            else:
                self._dead_letter(
                    rec, f"the report of this task was refused by Kafka: {err.reason}"
                )
        if retry:
            log.warning(
                "%d record(s) not acknowledged (%s); the batch runs again",
                remaining + len(failures),
                "; ".join(sorted({e.reason for _, e in failures})) or "timed out",
            )
            return False
        if failures:
            self.sink.flush(FLUSH_TIMEOUT_S)
        return True
