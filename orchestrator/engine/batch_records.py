"""The records a batch appends besides its events: activity tasks, commands to other runs
and dead letters, each encoded and size-checked into an :class:`Out` before anything of the
record that caused it is appended (so a failing record leaves no partial output)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.model.frozen_init import fast_init
from orchestrator.domain.model.messages import (
    ActivityDeadLettered,
    ActivityScheduled,
    ActivityTask,
    DeadLetter,
    Envelope,
)
from orchestrator.engine.runtime_context import RuntimeContext
from orchestrator.io.intake_letters import record_letter
from orchestrator.io.ports import DeliveryCallback, Record
from orchestrator.records.envelopes import check_record_size, dead_letter_envelope, follow_up

__all__ = [
    "Out",
    "activity_letter",
    "command_record",
    "intake_letter",
    "runtime_letter",
    "task_record",
]

log = logging.getLogger("keel.orchestrator")


@fast_init
@dataclass(frozen=True, slots=True)
class Out:
    """One record to append, fully encoded and checked."""

    topic: str
    value: bytes
    key: bytes | None
    partition: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    on_delivered: DeliveryCallback | None = None


def task_record(
    ctx: RuntimeContext,
    ev: Envelope[Any],
    key: bytes,
    headers: tuple[tuple[str, bytes], ...],
    now: int,
) -> Out:
    """The activity task a worker runs for the ``ActivityScheduled`` event ``ev``."""
    s: ActivityScheduled = ev.payload
    task = follow_up(
        ev,
        "task",
        now,
        ActivityTask(
            s.activity_id,
            s.activity_type,
            s.step,
            s.input_json,
            s.logical_attempt,
            s.attempt,
            s.idempotency_key,
            s.heartbeat_ms,
            s.report_start,
        ),
    )
    ctx.stats.tasks += 1
    value = check_record_size(ctx.codec.encode(task), f"task {s.activity_id}")
    return Out(ctx.topics.activity_tasks, value, key, None, headers)


def command_record(ctx: RuntimeContext, cmd: Envelope[Any]) -> Out:
    """A command another run is sent (docs/child-workflows.md), keyed by that run."""
    value = check_record_size(ctx.codec.encode(cmd), f"command {cmd.message_id}")
    return Out(ctx.topics.commands, value, cmd.workflow_id.encode())


def activity_letter(ctx: RuntimeContext, ev: Envelope[Any], key: bytes, now: int) -> Out:
    """An activity past its bounds: a keel.dlq record an operator can list and redrive."""
    d: ActivityDeadLettered = ev.payload
    reason = (
        f"activity '{d.activity_id}' dead-lettered after {d.attempts} attempts: "
        f"{d.error_type}: {d.message}"
    )
    letter = follow_up(
        ev,
        "dlq",
        now,
        DeadLetter(ctx.topics.events, -1, -1, reason, key, ctx.codec.encode(ev)),
    )
    ctx.stats.dead_letters += 1
    value = check_record_size(ctx.codec.encode(letter), f"the dead letter of {d.activity_id}")
    return Out(ctx.topics.dlq, value, key)


def intake_letter(
    ctx: RuntimeContext, rec: Record, env: Envelope[Any] | None, reason: str | None
) -> list[Out]:
    """The dead letter of an intake record; one that fits, even when the record is huge or odd."""
    reason = reason or "unknown"
    ctx.stats.dead_letters += 1
    log.warning("dead letter from %s[%d]@%d: %s", rec.topic, rec.partition, rec.offset, reason)
    try:
        value = ctx.codec.encode(record_letter(rec, reason, env, ctx.clock.now_ms()))
    except Exception:  # e.g. text the codec refuses: keep the letter, escape the text
        safe = reason.encode("ascii", "backslashreplace").decode("ascii")
        value = ctx.codec.encode(record_letter(rec, safe, None, ctx.clock.now_ms()))
    key = rec.key[:1024] if rec.key is not None else None
    return [Out(ctx.topics.dlq, check_record_size(value, "a dead letter"), key)]


def runtime_letter(
    ctx: RuntimeContext, env: Envelope[Any], partition: int, reason: str, now: int
) -> Out:
    """The dead letter of a command the engine made itself (a timer's fire, a local
    activity's report) that broke the decider: no intake record to point at."""
    ctx.stats.dead_letters += 1
    key = env.workflow_id.encode()
    letter = dead_letter_envelope(
        message_id=f"dlq/{env.message_id}",
        workflow_id=env.workflow_id,
        run_id=env.run_id,
        source_topic=ctx.topics.commands,
        source_partition=partition,
        source_offset=-1,
        reason=reason,
        key=key,
        value=ctx.codec.encode(env),
        now=now,
    )
    return Out(ctx.topics.dlq, ctx.codec.encode(letter), key)
