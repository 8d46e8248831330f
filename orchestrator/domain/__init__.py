"""Keel's pure domain: the whole model of a workflow run, with no I/O.

Four rooms, each importing only the rooms before it (and the standard library and
pydantic), so the model reads bottom-up:

- ``model``: the vocabulary, errors, limits, ids and keys, the message catalogue and the
  folded state of a run;
- ``authoring``: what an application declares (definitions, steps, waits, policies,
  upcasters, migrations) and the read-only ``Context`` its functions get;
- ``lifecycle``: ``evolve`` (state from events), ``command_handlers`` (events from
  commands), the lifecycles of activities, signals, human tasks, compensation and runs of a
  missing version, and the ``Decider`` facade the engine uses;
- ``history``: the invariants every recorded history satisfies and the replay check.

The layers are import-linter contracts (pyproject.toml, ``domain-rooms``); the Kafka runtime
depends on this package, never the reverse.
"""

from orchestrator.domain.authoring.definitions import (
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
    resolve_definition,
)
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.waits import operation_digest, sha256_hex, token_hash
from orchestrator.domain.history.invariants import (
    HistoryChecker,
    Invariant,
    Violation,
    check_history,
)
from orchestrator.domain.lifecycle.decider import (
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
from orchestrator.domain.lifecycle.human_tasks import TaskTokenHash, task_id_for
from orchestrator.domain.model.errors import (
    CommandRejected,
    DefinitionError,
    HistoryError,
    InvalidInputError,
    UnknownWorkflowError,
    format_validation_error,
)
from orchestrator.domain.model.keys import idempotency_key, parse_idempotency_key
from orchestrator.domain.model.messages import TERMINAL_EVENT_NAMES, TERMINAL_EVENTS
from orchestrator.domain.model.state import (
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
from orchestrator.domain.model.vocabulary import (
    ActivityStatus,
    CompensationCause,
    FailureClass,
    HumanDecision,
    HumanTaskStatus,
    ItemFailurePolicy,
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
    "ItemFailurePolicy",
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
