"""The payloads of compensation and sagas (docs/sagas.md), part of the message catalogue.

Kept apart so :mod:`orchestrator.domain.model.messages` stays readable; it re-exports every
name here and lists them in ``PAYLOAD_TYPES``. Same rules: frozen dataclasses mirroring
the Avro records in ``avro/`` field for field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "CompensationFailed",
    "CompensationStarted",
    "SagaEvent",
    "WorkflowCompensated",
    "WorkflowCompensationFailed",
]


@dataclass(frozen=True, slots=True)
class CompensationStarted:
    """The run failed (``cause`` ``failed``) or was cancelled (``cancelled``) after
    committed effects: ``plan_json`` lists the activity ids to undo, in the order their
    compensations run (newest completion first); ``reason`` is why (docs/sagas.md)."""

    KIND: ClassVar[str] = "event"
    cause: str
    reason: str
    plan_json: str


@dataclass(frozen=True, slots=True)
class CompensationFailed:
    """The compensation of ``activity_id`` failed past its bounds (or could not be
    computed): it is given up, the other compensations still run."""

    KIND: ClassVar[str] = "event"
    activity_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class WorkflowCompensated:
    """The run failed and every committed effect was undone; ``reason``: the failure."""

    KIND: ClassVar[str] = "event"
    TERMINAL: ClassVar[bool] = True
    reason: str


@dataclass(frozen=True, slots=True)
class WorkflowCompensationFailed:
    """A compensation failed past its bounds: the run ends with effects left to undo,
    named by the human task opened just before (``task_id``)."""

    KIND: ClassVar[str] = "event"
    TERMINAL: ClassVar[bool] = True
    reason: str
    task_id: str


@dataclass(frozen=True, slots=True)
class SagaEvent:
    """An event of a workflow, routed to one saga instance (topic keel.sagas, keyed by
    ``saga/correlation``): the saga manager's own log, from which it rebuilds a saga's
    state (docs/sagas.md). ``data_json`` is the event's payload as JSON."""

    KIND: ClassVar[str] = "saga_event"
    saga: str
    correlation: str
    workflow_name: str
    source_workflow_id: str
    event_type: str
    event_seq: int
    data_json: str
