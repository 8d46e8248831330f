"""The one factory of the envelopes the runtime writes itself, and the record size policy.

Every envelope the product builds outside the domain is built here: commands from outside a
run (:func:`command_envelope`: the client, the connector's webhooks, a dead letter's
redrive, a saga's commands, a migration's dry run), a record that follows another
(:func:`follow_up`: a task, a dead letter; :func:`report_envelope`: a worker's report on a
task), a command stamped with the deciding clock (:func:`stamped`), snapshots, dead letters
and anything else the runtime writes itself (:func:`runtime_envelope`). Three kinds of
construction stay where they are, and nowhere else builds an ``Envelope`` by hand:

- the domain's own (``orchestrator/domain``): the decider's events (``command_handlers``)
  and the commands replay rebuilds from a recorded history (``replay``); the domain is
  below this module and imports nothing from the runtime;
- decoding, which rebuilds an envelope that was already written, field for field:
  ``orchestrator/payload_schemas/codec.py`` (the Avro reader) and
  ``orchestrator/client/history_io.py`` (an exported history's JSON lines);
- tests, which build what they feed.

Every record Keel produces must fit under the broker's record limit (1 MiB by default),
so each is checked here against :data:`MAX_RECORD_BYTES` before it reaches a producer
(docs/limits.md). A dead letter wraps the record it refuses, so it truncates what it
wraps until the letter itself fits.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.domain.model.errors import LimitExceededError
from orchestrator.domain.model.limits import MAX_REASON_CHARS
from orchestrator.domain.model.messages import DeadLetter, Envelope, WorkflowSnapshot

__all__ = [
    "MAX_RECORD_BYTES",
    "check_record_size",
    "command_envelope",
    "dead_letter_envelope",
    "follow_up",
    "now_ms",
    "report_envelope",
    "runtime_envelope",
    "snapshot_envelope",
    "stamped",
]

#: The largest record Keel writes: room under the broker's 1,048,588-byte default and
#: librdkafka's 1,000,000-byte ``message.max.bytes`` for headers and batch overhead.
MAX_RECORD_BYTES = 900_000
#: Room the dead letter's own fields and envelope take besides the wrapped bytes.
_LETTER_OVERHEAD = 16_384
#: The longest key a dead letter keeps of a refused record.
_MAX_LETTER_KEY = 1_024


def check_record_size(data: bytes, what: str) -> bytes:
    """``data`` when it fits in one record; else ``LimitExceededError`` naming ``what``."""
    if len(data) > MAX_RECORD_BYTES:
        raise LimitExceededError(
            f"{what} would be a {len(data):,}-byte record; the limit is {MAX_RECORD_BYTES:,} "
            "bytes (store large documents elsewhere and pass a reference)"
        )
    return data


def runtime_envelope(
    message_id: str,
    workflow_id: str,
    run_id: str,
    payload: Any,
    now: int,
    *,
    seq: int = 0,
    causation_id: str | None = None,
    correlation_id: str | None = None,
    traceparent: str | None = None,
) -> Envelope[Any]:
    """An envelope the runtime writes (a timer firing, a task, a snapshot, a letter)."""
    return Envelope(
        message_id=message_id,
        workflow_id=workflow_id,
        run_id=run_id,
        seq=seq,
        type=type(payload).__name__,
        recorded_at=now,
        payload=payload,
        causation_id=causation_id,
        correlation_id=correlation_id,
        traceparent=traceparent,
    )


def follow_up(ev: Envelope[Any], tag: str, now: int, payload: Any) -> Envelope[Any]:
    """A record caused by event ``ev`` (its task, its dead letter): same run, chained ids."""
    return runtime_envelope(
        f"{ev.message_id}/{tag}",
        ev.workflow_id,
        ev.run_id,
        payload,
        now,
        causation_id=ev.message_id,
        correlation_id=ev.correlation_id,
        traceparent=ev.traceparent,
    )


def command_envelope(
    message_id: str,
    workflow_id: str,
    payload: Any,
    now: int,
    *,
    causation_id: str | None = None,
    correlation_id: str | None = None,
    traceparent: str | None = None,
) -> Envelope[Any]:
    """A command for ``keel.commands`` from outside a run (the client, a webhook, a redrive,
    a saga, a migration's dry run): no run id and seq 0, the orchestrator finds the run."""
    return runtime_envelope(
        message_id,
        workflow_id,
        "",
        payload,
        now,
        causation_id=causation_id,
        correlation_id=correlation_id,
        traceparent=traceparent,
    )


def report_envelope(
    task: Envelope[Any], message_id: str, payload: Any, now: int, traceparent: str | None
) -> Envelope[Any]:
    """A worker's report on ``task`` (its completion, failure, heartbeat): same run, caused
    by the task, in the task's correlation, under the worker's own span."""
    return runtime_envelope(
        message_id,
        task.workflow_id,
        task.run_id,
        payload,
        now,
        causation_id=task.message_id,
        correlation_id=task.correlation_id,
        traceparent=traceparent,
    )


def stamped(cmd: Envelope[Any], now: int) -> Envelope[Any]:
    """``cmd`` with ``recorded_at`` = ``now``, the deciding clock; everything else kept
    (``dataclasses.replace`` without its per-call field walk: the command loop's hot path)."""
    return Envelope(
        cmd.message_id,
        cmd.workflow_id,
        cmd.run_id,
        cmd.seq,
        cmd.type,
        now,
        cmd.payload,
        cmd.causation_id,
        cmd.correlation_id,
        cmd.traceparent,
    )


def snapshot_envelope(
    key: str, run_id: str, seq: int, state_json: str, events_offset: int, now: int
) -> Envelope[Any]:
    return runtime_envelope(
        f"snapshot/{key}/{seq}/{events_offset}",
        key,
        run_id,
        WorkflowSnapshot(state_json, events_offset),
        now,
        seq=seq,
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dead_letter_envelope(
    *,
    message_id: str,
    workflow_id: str,
    run_id: str,
    source_topic: str,
    source_partition: int,
    source_offset: int,
    reason: str,
    key: bytes | None,
    value: bytes | None,
    now: int,
    causation_id: str | None = None,
) -> Envelope[Any]:
    """A keel.dlq letter that always fits in one record: what it wraps is cut to fit."""
    notes = []
    workflow_id = _cut(workflow_id, _MAX_LETTER_KEY)
    if key is not None and len(key) > _MAX_LETTER_KEY:
        notes.append(f"key truncated from {len(key):,} bytes")
        key = key[:_MAX_LETTER_KEY]
    room = MAX_RECORD_BYTES - _LETTER_OVERHEAD - len(key or b"") - 4 * len(workflow_id)
    if value is not None and len(value) > room:
        notes.append(f"value truncated from {len(value):,} bytes")
        value = value[: max(0, room)]
    if notes:
        reason = f"{reason} ({'; '.join(notes)})"
    return runtime_envelope(
        message_id[:_MAX_LETTER_KEY],
        workflow_id,
        run_id,
        DeadLetter(
            source_topic,
            source_partition,
            source_offset,
            _cut(reason, MAX_REASON_CHARS),
            key,
            value,
        ),
        now,
        causation_id=causation_id,
    )


def now_ms() -> int:
    """Wall-clock epoch milliseconds: the ``recorded_at`` every Keel process stamps."""
    return time.time_ns() // 1_000_000
