"""Keel's pure domain: messages, workflow state, idempotency keys and the decider.

Nothing here does I/O; the Kafka runtime depends on this package, never the reverse.
"""

from orchestrator.domain.decider import (
    FAILURE_CLASSES,
    QUERY_RETRY,
    RESOLUTIONS,
    TIMEOUT_ERROR_TYPES,
    CommandRejected,
    Decider,
    HistoryError,
    activity_timeout,
    query_outcome,
    retry_delay_ms,
)
from orchestrator.domain.keys import idempotency_key, parse_idempotency_key
from orchestrator.domain.state import (
    ACTIVITY_STATUSES,
    NEEDS_ATTENTION,
    STATUSES,
    TERMINAL_STATUSES,
    ActivityState,
    TimerState,
    WaitState,
    WorkflowState,
)

__all__ = [
    "ACTIVITY_STATUSES",
    "FAILURE_CLASSES",
    "NEEDS_ATTENTION",
    "QUERY_RETRY",
    "RESOLUTIONS",
    "STATUSES",
    "TERMINAL_STATUSES",
    "TIMEOUT_ERROR_TYPES",
    "ActivityState",
    "CommandRejected",
    "Decider",
    "HistoryError",
    "TimerState",
    "WaitState",
    "WorkflowState",
    "activity_timeout",
    "idempotency_key",
    "parse_idempotency_key",
    "query_outcome",
    "retry_delay_ms",
]
