"""The events of fan-out steps (docs/fan-out.md), part of the message catalogue.

Kept apart so :mod:`orchestrator.domain.model.messages` stays readable; it re-exports every
name here and lists them in ``PAYLOAD_TYPES``. Same rules: frozen dataclasses mirroring
the Avro records in ``avro/`` field for field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["FanOutItemFailed", "FanOutStarted"]


@dataclass(frozen=True, slots=True)
class FanOutStarted:
    """Fan-out step ``step`` maps its activity over ``items`` inputs in this state visit.

    The list itself is not recorded: ``for_each`` is a pure function of recorded data,
    so the decider computes it again when it dispatches more items, and refuses a list
    whose ``items_digest`` (sha256 of its canonical JSON) differs from this one.
    """

    KIND: ClassVar[str] = "event"
    step: str
    items: int
    items_digest: str


@dataclass(frozen=True, slots=True)
class FanOutItemFailed:
    """Item ``index`` (activity ``activity_id``) failed for good and its step's
    ``on_item_failure`` policy lets the fan-out go on: it counts as ``null``."""

    KIND: ClassVar[str] = "event"
    activity_id: str
    index: int
    reason: str
