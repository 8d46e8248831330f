"""The payload of a refused command recorded in its run's history (docs/activities.md,
"Dead letters"), part of the message catalogue.

Kept apart so :mod:`orchestrator.domain.model.messages` stays readable; it re-exports the
name here and lists it in ``PAYLOAD_TYPES``. Same rules: a frozen dataclass mirroring the
Avro record in ``avro/`` field for field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["CommandRefused"]


@dataclass(frozen=True, slots=True)
class CommandRefused:
    """A command the run refused: recorded, never applied. ``command_id`` is its message
    id (also the envelope's causation id: a redelivery writes nothing, and the sender finds
    its answer here, in the log or the read model's history), ``command`` its type (e.g.
    ``SignalWorkflow``), ``what`` names it (``signal 'x'``), ``reason`` says why."""

    KIND: ClassVar[str] = "event"
    command_id: str
    command: str
    what: str
    reason: str
