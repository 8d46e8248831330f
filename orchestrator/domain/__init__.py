"""Keel's pure domain: the whole model of a workflow run, with no I/O.

Layers, each importing only those before it (and the standard library and pydantic):
``errors``, ``ids``, ``limits``, ``vocabulary`` -> ``saga_messages`` -> ``messages`` ->
``state``, ``keys`` -> ``context``, ``fingerprint`` -> ``waits`` (timer, signal and human waits) ->
``irreversible``, ``policies`` -> ``definitions`` -> ``activities`` (the activity lifecycle) ->
``signals`` (inbox, correlations, late signals) -> ``human_tasks`` (approvals) ->
``missing_versions`` (runs of a version this process lacks) ->
``compensation`` (undoing effects, docs/sagas.md) -> ``evolve`` (state from events) ->
``command_handlers`` (events from commands) -> ``decider`` (the facade the runtime uses) ->
``replay`` (re-decide recorded histories). ``invariants`` (what every recorded history
must satisfy, checked from the history alone) stands beside them, over ``messages``
only. The Kafka runtime depends on this package, never the reverse.
"""

from orchestrator.domain.context import Context
from orchestrator.domain.decider import (
    FAILURE_CLASSES,
    QUERY_RETRY,
    RESOLUTIONS,
    SUMMARY_EVENTS,
    TIMEOUT_ERROR_TYPES,
    Decider,
    activity_timeout,
    query_outcome,
    retry_delay_ms,
)
from orchestrator.domain.definitions import (
    ON_EXHAUSTED,
    TIMEOUT_KINDS,
    Compensation,
    Escalation,
    HumanTask,
    Migration,
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
    canonical_json,
    duration_ms,
    format_validation_error,
    resolve_definition,
)
from orchestrator.domain.errors import (
    CommandRejected,
    DefinitionError,
    HistoryError,
    InvalidInputError,
    UnknownWorkflowError,
)
from orchestrator.domain.human_tasks import TaskTokenHash, task_id_for
from orchestrator.domain.invariants import (
    HistoryChecker,
    Invariant,
    Violation,
    check_history,
)
from orchestrator.domain.keys import idempotency_key, parse_idempotency_key
from orchestrator.domain.messages import TERMINAL_EVENT_NAMES, TERMINAL_EVENTS
from orchestrator.domain.state import (
    ACTIVITY_STATUSES,
    NEEDS_ATTENTION,
    SEEN_COMMANDS_WINDOW,
    STATUSES,
    TERMINAL_STATUSES,
    ActivityState,
    CompensationState,
    HumanTaskState,
    TimerState,
    WaitState,
    WorkflowState,
)
from orchestrator.domain.vocabulary import (
    ActivityStatus,
    CompensationCause,
    FailureClass,
    HumanDecision,
    HumanTaskStatus,
    OnCancel,
    OnExhausted,
    OnExpiry,
    OnUnknown,
    PurposeKind,
    Resolution,
    TimeoutKind,
    TimerPurpose,
    WaitKind,
    WorkflowStatus,
)
from orchestrator.domain.waits import operation_digest, sha256_hex, token_hash

__all__ = [
    "ACTIVITY_STATUSES",
    "FAILURE_CLASSES",
    "NEEDS_ATTENTION",
    "ON_EXHAUSTED",
    "QUERY_RETRY",
    "RESOLUTIONS",
    "SEEN_COMMANDS_WINDOW",
    "STATUSES",
    "SUMMARY_EVENTS",
    "TERMINAL_EVENTS",
    "TERMINAL_EVENT_NAMES",
    "TERMINAL_STATUSES",
    "TIMEOUT_ERROR_TYPES",
    "TIMEOUT_KINDS",
    "ActivityState",
    "ActivityStatus",
    "CommandRejected",
    "Compensation",
    "CompensationCause",
    "CompensationState",
    "Context",
    "Decider",
    "DefinitionError",
    "Escalation",
    "FailureClass",
    "HistoryChecker",
    "HistoryError",
    "HumanDecision",
    "HumanTask",
    "HumanTaskState",
    "HumanTaskStatus",
    "InvalidInputError",
    "Invariant",
    "Migration",
    "OnCancel",
    "OnExhausted",
    "OnExpiry",
    "OnUnknown",
    "PurposeKind",
    "Resolution",
    "RetryPolicy",
    "SignalWait",
    "State",
    "Step",
    "TaskTokenHash",
    "TimeoutKind",
    "TimerPurpose",
    "TimerState",
    "TimerWait",
    "Transition",
    "UnknownWorkflowError",
    "Violation",
    "WaitKind",
    "WaitState",
    "WorkflowDefinition",
    "WorkflowState",
    "WorkflowStatus",
    "activity_timeout",
    "canonical_json",
    "check_history",
    "duration_ms",
    "format_validation_error",
    "idempotency_key",
    "operation_digest",
    "parse_idempotency_key",
    "query_outcome",
    "resolve_definition",
    "retry_delay_ms",
    "sha256_hex",
    "task_id_for",
    "token_hash",
]
