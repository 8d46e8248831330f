"""The words of the domain: statuses, failure classes, timeout kinds and timer purposes.

Each is a ``StrEnum`` whose values are the exact strings written to history and
snapshots, so a member compares equal to its string (``WorkflowStatus.RUNNING ==
"running"``) and code outside the domain that reads strings keeps working. Timer
purposes and timer ids are built and parsed here only (:class:`TimerPurpose`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ActivityStatus",
    "CompensationCause",
    "FailureClass",
    "HumanDecision",
    "HumanTaskStatus",
    "HumanTimer",
    "ItemFailurePolicy",
    "OnCancel",
    "OnExhausted",
    "OnExpiry",
    "ParentClosePolicy",
    "PurposeKind",
    "Resolution",
    "TimeoutKind",
    "TimerPurpose",
    "WaitKind",
    "WorkflowStatus",
]


class WorkflowStatus(StrEnum):
    """Where a run is. ``needs_attention``: not finished, but it waits for an operator
    (an activity is dead-lettered or its outcome stayed unknown, or the run itself hit a
    limit); a redrive or a resolution moves an activity on. ``compensating``: the run
    failed (or was cancelled) after committed effects and their compensations run
    (docs/sagas.md).

    Terminal: ``completed``; ``failed`` (nothing to undo); ``compensated`` (it failed
    and every committed effect was undone); ``compensation_failed`` (a compensation
    failed past its bounds: a human task names what is left to undo); ``cancelled``;
    ``terminated`` (stopped by a terminate: nothing compensated, docs/workflows.md)."""

    RUNNING = "running"
    WAITING = "waiting"
    NEEDS_ATTENTION = "needs_attention"
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    FAILED = "failed"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    CANCELLED = "cancelled"
    TERMINATED = "terminated"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        WorkflowStatus.COMPLETED,
        WorkflowStatus.FAILED,
        WorkflowStatus.COMPENSATED,
        WorkflowStatus.COMPENSATION_FAILED,
        WorkflowStatus.CANCELLED,
        WorkflowStatus.TERMINATED,
    }
)


class OnCancel(StrEnum):
    """What cancelling a run with committed effects does (a per-definition choice).

    ``compensate`` (the default): the compensations of its completed compensable steps
    run first, newest first, then the run ends ``cancelled`` (or
    ``compensation_failed``); ``abandon``: it ends ``cancelled`` at once and the
    effects stay.
    """

    COMPENSATE = "compensate"
    ABANDON = "abandon"


class CompensationCause(StrEnum):
    """Why a run compensates: it failed, or it was cancelled."""

    FAILED = "failed"
    CANCELLED = "cancelled"


class ActivityStatus(StrEnum):
    """One activity's lifecycle.

    ``scheduled``: dispatched, awaiting a report; ``backoff``: failed, retry timer armed;
    ``querying``: outcome unknown, its status query runs; ``attention``: outcome unknown
    and the query could not tell, an operator must resolve it; ``dead_lettered``: out of
    retries, an operator may redrive it; ``resolving``: settled within the decision that
    is folding it (never seen between decisions); ``completed`` / ``failed``: final;
    ``cancelled``: abandoned (state left or run ended).
    """

    SCHEDULED = "scheduled"
    BACKOFF = "backoff"
    QUERYING = "querying"
    ATTENTION = "attention"
    DEAD_LETTERED = "dead_lettered"
    RESOLVING = "resolving"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class FailureClass(StrEnum):
    """How a worker classifies a failed attempt; ``unknown``: a write may or may not
    have happened (its outcome must be established before anything is written again);
    ``throttled``: the attempt never ran, its activity type was over a per-type limit,
    and it is dispatched again after ``retry_after_ms`` without spending the retry
    budget (docs/limits.md, "Per-type limits")."""

    TRANSIENT = "transient"
    PERMANENT = "permanent"
    UNKNOWN = "unknown"
    THROTTLED = "throttled"


class TimeoutKind(StrEnum):
    """The activity timeouts a step may declare, in the order they can fire."""

    SCHEDULE_TO_START = "schedule_to_start"
    START_TO_CLOSE = "start_to_close"
    HEARTBEAT = "heartbeat"


class Resolution(StrEnum):
    """What an operator may say about an activity whose outcome stayed unknown."""

    FOUND = "found"
    NOT_FOUND = "not_found"
    FAILED = "failed"


class OnExhausted(StrEnum):
    """What a step does once a transient failure has no retries left."""

    DEAD_LETTER = "dead_letter"
    FAIL = "fail"


class OnUnknown(StrEnum):
    """What an attempt whose outcome is unknown leads to when its step has no status
    query (docs/activities.md): an operator decides, or (only when the remote side
    deduplicates by the idempotency key) the same key is dispatched again."""

    ATTENTION = "attention"
    RETRY = "retry"


class ParentClosePolicy(StrEnum):
    """What becomes of a child run still going when its parent stops awaiting it (the
    parent ended, was cancelled or left the state; docs/child-workflows.md): ``cancel``
    sends it a cancel (it compensates as its definition says), ``terminate`` stops it at
    once without compensating, ``abandon`` lets it run."""

    CANCEL = "cancel"
    TERMINATE = "terminate"
    ABANDON = "abandon"


class ItemFailurePolicy(StrEnum):
    """What a fan-out step does when one of its items fails for good (docs/fan-out.md):
    fail the step at once, collect every failure, or tolerate up to ``tolerate`` of them."""

    FAIL_FAST = "fail_fast"
    COLLECT = "collect"
    TOLERATE = "tolerate"


class WaitKind(StrEnum):
    TIMER = "timer"
    SIGNAL = "signal"
    HUMAN = "human"


class HumanDecision(StrEnum):
    """What a person may decide about a human task (docs/human-tasks.md)."""

    APPROVE = "approve"
    REJECT = "reject"


class OnExpiry(StrEnum):
    """What a human task does when it expires undecided: never an approval.

    ``reject``: the task's reject path; ``cancel``: the run is cancelled. A
    ``HumanTask`` may instead name a state to enter (the validator refuses the
    approve target).
    """

    REJECT = "reject"
    CANCEL = "cancel"


class HumanTaskStatus(StrEnum):
    """Where a human task is: ``open`` until decided, expired, or its state is left
    (``closed``: the run moved on or ended without a decision)."""

    OPEN = "open"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CLOSED = "closed"


class HumanTimer(StrEnum):
    """The durable timers of an open human task."""

    REMIND = "remind"
    ESCALATE = "escalate"
    EXPIRE = "expire"


class PurposeKind(StrEnum):
    """Why a durable timer exists."""

    #: A state's ``TimerWait``.
    WAIT = "wait"
    #: A state's ``SignalWait`` timeout.
    SIGNAL_TIMEOUT = "signal_timeout"
    #: An activity timeout (schedule-to-start, start-to-close, heartbeat).
    ACTIVITY_TIMEOUT = "activity_timeout"
    #: The backoff before an activity's next attempt.
    RETRY = "retry"
    #: A human task's reminder, escalation or expiry.
    HUMAN = "human"
    #: A continue-as-new held back by the workflow's continue budget (docs/limits.md).
    CONTINUE = "continue"
    #: A purpose this version does not know (recorded, never acted on).
    OTHER = "other"


_RETRY = "retry:"
_HUMAN = "human:"
_TIMEOUT_KINDS = frozenset(k.value for k in TimeoutKind)
_HUMAN_TIMERS = frozenset(k.value for k in HumanTimer)
_TIMEOUT = "timeout:"


@dataclass(frozen=True, slots=True)
class TimerPurpose:
    """A timer's purpose, as recorded in ``TimerScheduled.purpose``.

    Wire forms: ``wait``; ``timeout:<signal>``; ``timeout:<kind>:<activity id>``;
    ``retry:<activity id>``; ``human:<remind|escalate|expire>:<n>``; ``continue``. Signal names hold
    no ``:``, so a signal timeout and an activity timeout never read as each other.
    ``subject`` is the activity id, the signal name, the human timer's ordinal (``n``,
    1-based; ``0`` for the expiry) or (for ``OTHER``) the whole unknown text.
    """

    kind: PurposeKind
    subject: str = ""
    timeout: TimeoutKind | None = None
    human: HumanTimer | None = None

    @classmethod
    def wait(cls) -> TimerPurpose:
        return cls(PurposeKind.WAIT)

    @classmethod
    def signal_timeout(cls, signal: str) -> TimerPurpose:
        return cls(PurposeKind.SIGNAL_TIMEOUT, signal)

    @classmethod
    def activity_timeout(cls, kind: TimeoutKind, activity_id: str) -> TimerPurpose:
        return cls(PurposeKind.ACTIVITY_TIMEOUT, activity_id, kind)

    @classmethod
    def retry(cls, activity_id: str) -> TimerPurpose:
        return cls(PurposeKind.RETRY, activity_id)

    @classmethod
    def human_timer(cls, kind: HumanTimer, n: int = 0) -> TimerPurpose:
        return cls(PurposeKind.HUMAN, str(n), human=kind)

    @classmethod
    def continue_as_new(cls) -> TimerPurpose:
        return cls(PurposeKind.CONTINUE)

    @classmethod
    def parse(cls, text: str) -> TimerPurpose:
        """The purpose ``text`` spells (``OTHER`` for anything else; never raises)."""
        if text == "wait":
            return cls.wait()
        if text == "continue":
            return cls.continue_as_new()
        if text.startswith(_HUMAN):
            kind, sep, n = text[len(_HUMAN) :].partition(":")
            if sep and kind in _HUMAN_TIMERS and n.isdigit():
                return cls.human_timer(HumanTimer(kind), int(n))
            return cls(PurposeKind.OTHER, text)
        if text.startswith(_RETRY):
            return cls.retry(text[len(_RETRY) :])
        if text.startswith(_TIMEOUT):
            rest = text[len(_TIMEOUT) :]
            kind, sep, aid = rest.partition(":")
            if sep and kind in _TIMEOUT_KINDS:
                return cls.activity_timeout(TimeoutKind(kind), aid)
            return cls.signal_timeout(rest)
        return cls(PurposeKind.OTHER, text)

    def __str__(self) -> str:
        k = self.kind
        if k is PurposeKind.WAIT:
            return "wait"
        if k is PurposeKind.CONTINUE:
            return "continue"
        if k is PurposeKind.RETRY:
            return f"{_RETRY}{self.subject}"
        if k is PurposeKind.ACTIVITY_TIMEOUT:
            return f"{_TIMEOUT}{self.timeout}:{self.subject}"
        if k is PurposeKind.SIGNAL_TIMEOUT:
            return f"{_TIMEOUT}{self.subject}"
        if k is PurposeKind.HUMAN:
            return f"{_HUMAN}{self.human}:{self.subject}"
        return self.subject

    @property
    def is_wait(self) -> bool:
        """A timer of the state's wait (its duration or its signal timeout)."""
        return self.kind in (PurposeKind.WAIT, PurposeKind.SIGNAL_TIMEOUT)

    def timer_id(self, base: str, suffix: str = "") -> str:
        """The timer id: ``base`` is the state visit (``state#visit``) for a wait's, a held
        continue's or a human task's timer, else ignored; ``suffix`` tells attempts (and
        heartbeats) apart."""
        k = self.kind
        if k is PurposeKind.WAIT:
            return f"{base}/wait"
        if k is PurposeKind.CONTINUE:
            return f"{base}/continue"
        if k is PurposeKind.SIGNAL_TIMEOUT:
            return f"{base}/timeout"
        if k is PurposeKind.RETRY:
            return f"{self.subject}/retry/{suffix}"
        if k is PurposeKind.ACTIVITY_TIMEOUT:
            return f"{self.subject}/timeout/{self.timeout}/{suffix}"
        if k is PurposeKind.HUMAN:
            return f"{base}/{self.human}/{self.subject}"
        raise ValueError(f"no timer id for purpose {self}")
