"""The dead letters a worker writes: a task it cannot run, kept within one record.

A letter wraps the task record it stands for; one that would not fit Kafka's record limit
drops the wrapped value and says where the original stays (docs/limits.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.domain.model.limits import MAX_REASON_CHARS
from orchestrator.domain.model.messages import Envelope
from orchestrator.io.intake_letters import record_letter
from orchestrator.io.ports import Record

__all__ = ["MAX_RECORD_BYTES", "bounded_dead_letter"]

#: The largest record the worker produces (the producer's default ``message.max.bytes``;
#: brokers accept 1 MiB by default). Anything larger is replaced, never sent.
MAX_RECORD_BYTES = 1_000_000
#: Room kept for the dead letter's own fields when it wraps a record.
_DEAD_LETTER_OVERHEAD = 16 * 1024
#: A record key longer than this is cut in dead letters (keys are workflow ids).
_MAX_KEY_BYTES = 4096


def bounded_dead_letter(
    rec: Record, reason: str, env: Envelope[Any] | None, now: int
) -> Envelope[Any]:
    """``record_letter(rec, reason, env, now)`` cut to fit one record: an oversized value
    is not kept.

    The original record stays in its topic at the offset the letter names (until the
    topic's retention), so nothing is lost that an operator cannot find. Decided on the
    record as read, before the envelope factory cuts what it wraps (and notes its cuts).
    """
    reason = reason[:MAX_REASON_CHARS]
    room = MAX_RECORD_BYTES - _DEAD_LETTER_OVERHEAD - 2 * min(len(rec.key or b""), _MAX_KEY_BYTES)
    if rec.value is not None and len(rec.value) > room:
        note = (
            f" [the {len(rec.value):,}-byte record is too large to keep here; it stays at "
            f"{rec.topic}[{rec.partition}]@{rec.offset}]"
        )
        reason = reason[: MAX_REASON_CHARS - len(note)] + note
        rec = dataclasses.replace(rec, value=None)
    return record_letter(rec, reason, env, now)
