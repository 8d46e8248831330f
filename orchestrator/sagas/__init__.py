"""Sagas: process managers that react to workflow events with commands (docs/sagas.md).

Declare one on an application with :func:`register`; ``keel sagas`` (alone) or ``keel
orchestrator`` (a supervised thread, when the application declares any) runs
:class:`~orchestrator.sagas.manager.SagaManager` (import it from there: this package's face is
what an application declares, and loads no Kafka client). Compensation of a single run's effects
is the decider's built-in saga (``orchestrator.domain.lifecycle.compensation``), not this.
"""

from __future__ import annotations

from orchestrator.sagas.declare import (
    Emit,
    Saga,
    SagaFact,
    SagaView,
    command_id,
    register,
    sagas_of,
)

__all__ = [
    "Emit",
    "Saga",
    "SagaFact",
    "SagaView",
    "command_id",
    "register",
    "sagas_of",
]
