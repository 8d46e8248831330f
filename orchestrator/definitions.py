"""Compatibility home of the definitions API; it lives in :mod:`orchestrator.domain.definitions`.

Kept so ``from orchestrator.definitions import ...`` goes on working; new code imports
from ``orchestrator.domain`` (or ``orchestrator.domain.definitions``).
"""

from orchestrator.domain.definitions import (
    DEFAULT_RETRY,
    ON_EXHAUSTED,
    TIMEOUT_KINDS,
    Context,
    DefinitionError,
    Duration,
    InvalidInputError,
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    UnknownWorkflowError,
    WorkflowDefinition,
    callable_fingerprint,
    canonical_json,
    duration_ms,
    format_validation_error,
    index_definitions,
    resolve_definition,
)

__all__ = [
    "DEFAULT_RETRY",
    "ON_EXHAUSTED",
    "TIMEOUT_KINDS",
    "Context",
    "DefinitionError",
    "Duration",
    "InvalidInputError",
    "RetryPolicy",
    "SignalWait",
    "State",
    "Step",
    "TimerWait",
    "Transition",
    "UnknownWorkflowError",
    "WorkflowDefinition",
    "callable_fingerprint",
    "canonical_json",
    "duration_ms",
    "format_validation_error",
    "index_definitions",
    "resolve_definition",
]
