"""The message catalogue: every command, event and record Keel writes to Kafka.

Payloads are frozen dataclasses whose field names and types mirror, one to one,
the Avro records in ``avro/`` (the codec maps them without any per-type code).
Values that are free-form workflow data (inputs, outputs, results, signal
payloads) travel as JSON text in ``*_json`` fields: the domain parses them when
it needs them, and the wire format never depends on a user's pydantic models.

An event class that ends a run says so with ``TERMINAL = True``; ``TERMINAL_EVENTS``
and ``TERMINAL_EVENT_NAMES`` are derived from that flag, so there is one registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar, get_args

from orchestrator.domain.model.fan_out_messages import FanOutItemFailed, FanOutStarted
from orchestrator.domain.model.frozen_init import fast_init
from orchestrator.domain.model.migration_messages import MigrateWorkflow, WorkflowMigrated
from orchestrator.domain.model.refusal_messages import CommandRefused
from orchestrator.domain.model.saga_messages import (
    CompensationFailed,
    CompensationStarted,
    SagaEvent,
    WorkflowCompensated,
    WorkflowCompensationFailed,
)

# ---------------------------------------------------------------------------
# Commands (topic keel.commands): requests to change one workflow.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartWorkflow:
    """Start a run of definition ``name`` (latest version when ``version`` is None);
    a child run names its parent and the parent's activity that awaits it."""

    KIND: ClassVar[str] = "command"
    name: str
    version: int | None
    input_json: str
    parent_workflow_id: str | None = None
    parent_activity_id: str | None = None


@dataclass(frozen=True, slots=True)
class CompleteActivity:
    """A worker reports that attempt ``attempt`` of ``activity_id`` succeeded."""

    KIND: ClassVar[str] = "command"
    activity_id: str
    attempt: int
    result_json: str
    #: Version of the result schema the handler wrote (0: unversioned).
    schema_version: int = 0


@dataclass(frozen=True, slots=True)
class FailActivity:
    """A worker reports a failed attempt.

    ``failure_class`` is one of ``transient``, ``permanent``, ``unknown``
    (outcome unknown: a write that may or may not have happened).
    """

    KIND: ClassVar[str] = "command"
    activity_id: str
    attempt: int
    failure_class: str
    error_type: str
    message: str
    #: The service asked to wait this long before the next attempt (0: no ask).
    retry_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class SignalWorkflow:
    """Deliver an external signal (e.g. ``documents_added``) to a workflow.

    ``correlation`` (optional) names the wait it answers; a wait declared with a
    correlation refuses a signal whose correlation differs (docs/workflows.md).
    """

    KIND: ClassVar[str] = "command"
    signal_name: str
    payload_json: str
    correlation: str | None = None


@dataclass(frozen=True, slots=True)
class SignalWithStart:
    """Deliver signal ``signal_name`` to a workflow, first starting a run of ``name``
    (latest version when ``version`` is None) with ``input_json`` if the workflow has
    none: one command, one decision (docs/workflows.md, "Signal-with-start")."""

    KIND: ClassVar[str] = "command"
    name: str
    input_json: str
    signal_name: str
    payload_json: str
    version: int | None = None
    correlation: str | None = None


@dataclass(frozen=True, slots=True)
class FireTimer:
    """A durable timer is due; ``recorded_at`` of its envelope is the firing time."""

    KIND: ClassVar[str] = "command"
    timer_id: str


@dataclass(frozen=True, slots=True)
class CancelWorkflow:
    """Cancel a running workflow."""

    KIND: ClassVar[str] = "command"
    reason: str


@dataclass(frozen=True, slots=True)
class TerminateWorkflow:
    """Stop a run at once: no compensation, even mid-compensation (docs/workflows.md)."""

    KIND: ClassVar[str] = "command"
    reason: str


@dataclass(frozen=True, slots=True)
class HeartbeatActivity:
    """A worker reports progress on an attempt; the first heartbeat also marks it started."""

    KIND: ClassVar[str] = "command"
    activity_id: str
    attempt: int
    details_json: str
    #: The handler is a ``@side_effect``: once started, a timeout leaves its outcome unknown.
    side_effect: bool = False


@dataclass(frozen=True, slots=True)
class ResolveActivity:
    """An operator settles an activity whose outcome Keel could not establish.

    ``resolution`` is ``found`` (the effect happened: ``result_json`` is its result),
    ``not_found`` (it did not: retry the same logical attempt) or ``failed`` (give up:
    take the step's failure path with ``reason``).
    """

    KIND: ClassVar[str] = "command"
    activity_id: str
    resolution: str
    result_json: str
    reason: str


@dataclass(frozen=True, slots=True)
class RedriveActivity:
    """An operator sends a dead-lettered activity out again (same logical attempt and key)."""

    KIND: ClassVar[str] = "command"
    activity_id: str


@dataclass(frozen=True, slots=True)
class DecideHumanTask:
    """A person decides a human task (docs/human-tasks.md): ``token_hash`` is the presented
    token's sha256; ``actor``, ``actor_roles_json`` (JSON array) are as the sender checked
    and signed them (``proof``: orchestrator/trust/decision_proofs.py); ``reason`` is kept
    as its sha256; ``operation_digest`` is what the approver saw; ``correction_json``: data."""

    KIND: ClassVar[str] = "command"
    task_id: str
    token_hash: str
    decision: str
    actor: str
    actor_roles_json: str
    reason: str
    operation_digest: str
    correction_json: str = ""
    proof: str = ""


# ---------------------------------------------------------------------------
# Events (topic keel.events, the event store): facts about one workflow.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkflowStarted:
    KIND: ClassVar[str] = "event"
    name: str
    version: int
    definition_digest: str
    input_json: str
    #: Version of the input schema the input was accepted under (0: unversioned).
    input_schema_version: int = 0
    #: A child run's parent workflow and the parent's activity awaiting it (None: none).
    parent_workflow_id: str | None = None
    parent_activity_id: str | None = None


@dataclass(frozen=True, slots=True)
class StateEntered:
    """The workflow entered state ``state`` for the ``visit``-th time (1-based)."""

    KIND: ClassVar[str] = "event"
    state: str
    visit: int


@dataclass(frozen=True, slots=True)
class ActivityScheduled:
    """An activity attempt was dispatched.

    ``activity_id`` names one business intent (stable across retries);
    ``logical_attempt`` changes only when the workflow decides to try a new
    intent; ``attempt`` counts physical dispatches; ``idempotency_key`` is the
    unambiguous encoding of (workflow id, activity type, logical attempt).
    """

    KIND: ClassVar[str] = "event"
    activity_id: str
    activity_type: str
    step: str
    input_json: str
    logical_attempt: int
    attempt: int
    idempotency_key: str
    #: Heartbeat timeout of this attempt in ms (0: none); the worker heartbeats well within it.
    heartbeat_ms: int = 0
    #: The worker reports the attempt's start (schedule-to-start or heartbeat timeouts apply).
    report_start: bool = False


@dataclass(frozen=True, slots=True)
class ActivityCompleted:
    KIND: ClassVar[str] = "event"
    activity_id: str
    attempt: int
    result_json: str
    #: Version of the result schema the handler wrote (0: unversioned).
    schema_version: int = 0


@dataclass(frozen=True, slots=True)
class ActivityFailed:
    KIND: ClassVar[str] = "event"
    activity_id: str
    attempt: int
    failure_class: str
    error_type: str
    message: str
    #: As reported: the next attempt waits at least this long (0: the policy alone).
    retry_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class TimerScheduled:
    """A durable timer; ``fire_at`` is epoch milliseconds, ``purpose`` says why."""

    KIND: ClassVar[str] = "event"
    timer_id: str
    fire_at: int
    purpose: str


@dataclass(frozen=True, slots=True)
class TimerFired:
    KIND: ClassVar[str] = "event"
    timer_id: str


@dataclass(frozen=True, slots=True)
class SignalReceived:
    KIND: ClassVar[str] = "event"
    signal_name: str
    payload_json: str
    correlation: str | None = None


@dataclass(frozen=True, slots=True)
class SignalRefused:
    """A signal was recorded but not applied: it came late, for a wait the run left,
    or its correlation did not match the wait's (``reason`` says which)."""

    KIND: ClassVar[str] = "event"
    signal_name: str
    correlation: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class SignalWaitOpened:
    """A wait with a correlation began: only a signal carrying ``correlation`` satisfies it."""

    KIND: ClassVar[str] = "event"
    signal_name: str
    correlation: str


@dataclass(frozen=True, slots=True)
class HumanTaskOpened:
    """A human task waits for a decision (docs/human-tasks.md).

    ``operation_digest`` is the sha256 of the canonical JSON of ``resource``,
    ``arguments_digest``, ``schema_version`` and ``policy_version``: the exact operation
    an approval approves. ``token_hash`` is the sha256 hex of the task token the
    runtime issued (the token itself is never recorded). Times are epoch ms
    (``due_at`` 0: no SLA).
    """

    KIND: ClassVar[str] = "event"
    task_id: str
    task_name: str
    owner: str
    role: str
    evidence_json: str
    evidence_digest: str
    resource: str
    arguments_digest: str
    schema_version: int
    policy_version: str
    operation_digest: str
    due_at: int
    expires_at: int
    token_hash: str
    #: A correction task: the JSON schema its correction must satisfy ("": none).
    correction_schema_json: str = ""


@dataclass(frozen=True, slots=True)
class HumanTaskReminded:
    """The ``reminder``-th reminder of an open task is due for ``owner``."""

    KIND: ClassVar[str] = "event"
    task_id: str
    reminder: int
    owner: str


@dataclass(frozen=True, slots=True)
class HumanTaskEscalated:
    """An open task moved to escalation ``level`` (1-based): its owner and role now."""

    KIND: ClassVar[str] = "event"
    task_id: str
    level: int
    owner: str
    role: str


@dataclass(frozen=True, slots=True)
class HumanTaskDecided:
    """A qualified actor decided a task. The last four fields: the signed evidence, whose
    ``proof`` ``decision_proof`` recomputes (runtime/decision_proofs.py); pre-v6: defaults."""

    KIND: ClassVar[str] = "event"
    task_id: str
    decision: str
    actor: str
    reason_digest: str
    evidence_digest: str
    operation_digest: str
    decided_at: int
    correction_json: str = ""  # validated against the task's schema ("": none)
    token_hash: str = ""
    actor_roles_json: str = "[]"
    proof: str = ""
    correction_digest: str = ""


@dataclass(frozen=True, slots=True)
class HumanTaskExpired:
    """A task expired undecided; ``outcome`` is ``reject``, ``cancel`` or a state name."""

    KIND: ClassVar[str] = "event"
    task_id: str
    outcome: str


@dataclass(frozen=True, slots=True)
class WorkflowContinuedAsNew:
    """The run ended and the workflow goes on as run ``new_run_id`` with ``input_json``.

    The events after it belong to the new run; sequence numbers go on contiguously.
    """

    KIND: ClassVar[str] = "event"
    new_run_id: str
    input_json: str


@dataclass(frozen=True, slots=True)
class ActivityHeartbeat:
    """An attempt's worker reported progress (the first one: the attempt started)."""

    KIND: ClassVar[str] = "event"
    activity_id: str
    attempt: int
    details_json: str
    #: The handler is a ``@side_effect``: once started, a timeout leaves its outcome unknown.
    side_effect: bool = False


@dataclass(frozen=True, slots=True)
class ActivityTimedOut:
    """An attempt ran out of time: ``timeout`` is schedule_to_start, start_to_close or heartbeat."""

    KIND: ClassVar[str] = "event"
    activity_id: str
    attempt: int
    timeout: str


@dataclass(frozen=True, slots=True)
class ActivityDeadLettered:
    """An activity exhausted its retries and waits in the dead-letter queue for an operator."""

    KIND: ClassVar[str] = "event"
    activity_id: str
    attempts: int
    error_type: str
    message: str


@dataclass(frozen=True, slots=True)
class ActivityRedriven:
    """An operator sent a dead-lettered activity out again."""

    KIND: ClassVar[str] = "event"
    activity_id: str


@dataclass(frozen=True, slots=True)
class ActivityResolved:
    """An operator settled an activity whose outcome was unknown (see ``ResolveActivity``)."""

    KIND: ClassVar[str] = "event"
    activity_id: str
    resolution: str
    reason: str


@dataclass(frozen=True, slots=True)
class WorkflowNeedsAttention:
    """The run cannot go on without an operator (e.g. an outcome that stayed unknown)."""

    KIND: ClassVar[str] = "event"
    activity_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class WorkflowCompleted:
    KIND: ClassVar[str] = "event"
    TERMINAL: ClassVar[bool] = True
    output_json: str


@dataclass(frozen=True, slots=True)
class WorkflowFailed:
    KIND: ClassVar[str] = "event"
    TERMINAL: ClassVar[bool] = True
    reason: str


@dataclass(frozen=True, slots=True)
class WorkflowCancelled:
    KIND: ClassVar[str] = "event"
    TERMINAL: ClassVar[bool] = True
    reason: str


@dataclass(frozen=True, slots=True)
class WorkflowTerminated:
    KIND: ClassVar[str] = "event"
    TERMINAL: ClassVar[bool] = True
    reason: str


# -- Other records: activity tasks, snapshots, dead letters. ------------------------


@dataclass(frozen=True, slots=True)
class ActivityTask:
    """What a worker runs (topic keel.activity-tasks); mirrors ``ActivityScheduled``."""

    KIND: ClassVar[str] = "task"
    activity_id: str
    activity_type: str
    step: str
    input_json: str
    logical_attempt: int
    attempt: int
    idempotency_key: str
    #: Heartbeat timeout of this attempt in ms (0: none); the worker heartbeats well within it.
    heartbeat_ms: int = 0
    #: The worker reports the attempt's start (schedule-to-start or heartbeat timeouts apply).
    report_start: bool = False


@dataclass(frozen=True, slots=True)
class WorkflowSnapshot:
    """Folded state of one workflow (topic keel.snapshots, compacted).

    ``events_offset`` is the keel.events offset just past the last event folded in.
    """

    KIND: ClassVar[str] = "snapshot"
    state_json: str
    events_offset: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not be processed, with its origin and the reason."""

    KIND: ClassVar[str] = "dead_letter"
    source_topic: str
    source_partition: int
    source_offset: int
    reason: str
    key: bytes | None
    value: bytes | None


Command = (
    StartWorkflow
    | CompleteActivity
    | FailActivity
    | SignalWorkflow
    | FireTimer
    | CancelWorkflow
    | HeartbeatActivity
    | ResolveActivity
    | RedriveActivity
    | DecideHumanTask
    | MigrateWorkflow
    | SignalWithStart
    | TerminateWorkflow
)
Event = (
    WorkflowStarted
    | StateEntered
    | ActivityScheduled
    | ActivityCompleted
    | ActivityFailed
    | TimerScheduled
    | TimerFired
    | SignalReceived
    | ActivityHeartbeat
    | ActivityTimedOut
    | ActivityDeadLettered
    | ActivityRedriven
    | ActivityResolved
    | WorkflowNeedsAttention
    | WorkflowCompleted
    | WorkflowFailed
    | WorkflowCancelled
    | SignalRefused
    | SignalWaitOpened
    | HumanTaskOpened
    | HumanTaskReminded
    | HumanTaskEscalated
    | HumanTaskDecided
    | HumanTaskExpired
    | WorkflowContinuedAsNew
    | CompensationStarted
    | CompensationFailed
    | WorkflowCompensated
    | WorkflowCompensationFailed
    | WorkflowMigrated
    | CommandRefused
    | FanOutStarted
    | FanOutItemFailed
    | WorkflowTerminated
)
Payload = Command | Event | ActivityTask | WorkflowSnapshot | DeadLetter | SagaEvent

#: Every payload type by its wire name (Avro's short name), each given ``fast_init`` here.
PAYLOAD_TYPES: dict[str, type] = {cls.__name__: fast_init(cls) for cls in get_args(Payload)}

#: The events that end a run, derived from their ``TERMINAL`` flag (the one registry).
TERMINAL_EVENTS: tuple[type, ...] = tuple(
    cls for cls in PAYLOAD_TYPES.values() if getattr(cls, "TERMINAL", False)
)
#: Their wire names (the ``type`` of their envelopes and the record header).
TERMINAL_EVENT_NAMES: frozenset[str] = frozenset(cls.__name__ for cls in TERMINAL_EVENTS)

P = TypeVar("P")


@fast_init
@dataclass(frozen=True, slots=True)
class Envelope(Generic[P]):
    """The one envelope around every record on every Keel topic.

    ``seq`` is the contiguous 1-based sequence number of an event within its workflow
    (0 for records that are not events). ``recorded_at`` is epoch milliseconds, the only
    clock the domain reads. ``type`` is the payload's wire name (the schema fingerprint
    is in the single-object-encoding header).
    """

    message_id: str
    workflow_id: str
    run_id: str
    seq: int
    type: str
    recorded_at: int
    payload: P
    causation_id: str | None = None
    correlation_id: str | None = None
    traceparent: str | None = field(default=None, compare=False)
