"""The dead letter of a record a process read and could not handle: a keel.dlq envelope
that names the record's topic, partition and offset and wraps its key and value
(docs/activities.md, "Dead letters").

Built from a ports :class:`~orchestrator.io.ports.Record` and stamped with the time the
caller's clock gives, so the engine and the worker write letters on their injected clock
(the test kit's manual one included) and neither imports a Kafka client to write one.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.model.messages import Envelope
from orchestrator.io.ports import Record
from orchestrator.records.envelopes import dead_letter_envelope

__all__ = ["record_letter"]


def record_letter(rec: Record, reason: str, env: Envelope[Any] | None, now: int) -> Envelope[Any]:
    """The keel.dlq envelope for ``rec``, recorded at ``now`` (epoch ms).

    ``env`` is the record decoded, when it could be; else the key names the workflow.
    The letter always fits in one record: what it wraps is truncated to fit.
    """
    key = rec.key
    return dead_letter_envelope(
        message_id=f"dlq/{rec.topic}/{rec.partition}/{rec.offset}",
        workflow_id=env.workflow_id if env else (key or b"").decode("utf-8", "replace"),
        run_id=env.run_id if env else "",
        source_topic=rec.topic,
        source_partition=rec.partition,
        source_offset=rec.offset,
        reason=reason,
        key=key,
        value=rec.value,
        now=now,
        causation_id=env.message_id if env else None,
    )
