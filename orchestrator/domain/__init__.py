"""Keel's pure domain: messages, workflow state, idempotency keys and the decider.

Nothing here does I/O; the Kafka runtime depends on this package, never the reverse.
"""

from orchestrator.domain.decider import (
    FAILURE_CLASSES,
    CommandRejected,
    Decider,
    HistoryError,
    retry_delay_ms,
)
from orchestrator.domain.keys import idempotency_key, parse_idempotency_key
from orchestrator.domain.state import (
    STATUSES,
    TERMINAL_STATUSES,
    ActivityState,
    TimerState,
    WaitState,
    WorkflowState,
)

__all__ = [
    "FAILURE_CLASSES",
    "STATUSES",
    "TERMINAL_STATUSES",
    "ActivityState",
    "CommandRejected",
    "Decider",
    "HistoryError",
    "TimerState",
    "WaitState",
    "WorkflowState",
    "idempotency_key",
    "parse_idempotency_key",
    "retry_delay_ms",
]
