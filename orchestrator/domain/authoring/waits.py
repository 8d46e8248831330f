"""What a state may wait for: a durable timer, a signal, or a person (docs/workflows.md).

A :class:`TimerWait` waits a duration; a :class:`SignalWait` waits for an external
signal, optionally checked against a correlation; a :class:`HumanTask` waits for a
qualified person to approve or reject one exact operation (docs/human-tasks.md); with
``correction`` it is a correction task, whose approval carries the corrected data.

Each wait validates itself against the definition it belongs to and describes itself
for the definition's digest; the description of a wait that uses none of the newer
options is what it always was, so digests of existing definitions hold.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.fingerprint import callable_fingerprint, canonical_json
from orchestrator.domain.model.limits import MAX_DURATION_MS
from orchestrator.domain.model.vocabulary import OnExpiry

__all__ = [
    "Duration",
    "Escalation",
    "HumanTask",
    "SignalWait",
    "TimerWait",
    "correction_schema",
    "describe_wait",
    "duration_ms",
    "operation_digest",
    "sha256_hex",
    "token_hash",
    "validate_wait",
]

Duration = int | float | timedelta
_MAX_DAYS = MAX_DURATION_MS // (24 * 3600 * 1000)


def duration_ms(value: Duration) -> int:
    """Milliseconds of a duration given in seconds or as a ``timedelta``.

    ``TypeError`` for anything else, ``ValueError`` when negative, not a number or
    longer than ``MAX_DURATION_MS`` (so no timer can overflow a recorded time).
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a duration must be seconds or a timedelta, got {value!r}"[:200])
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"a duration must be >= 0 seconds, got {value!r}"[:200])
    if seconds * 1000 > MAX_DURATION_MS:
        raise ValueError(
            f"a duration must be at most {_MAX_DAYS:,} days, got {seconds:.6g} seconds"
        )
    return round(seconds * 1000)


def sha256_hex(text: str) -> str:
    """The sha256 of ``text`` (UTF-8), hex: how reasons, evidence and tokens are recorded."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def token_hash(token: str) -> str:
    """What history records of a task token, and what a decision sends instead of it."""
    return sha256_hex(token)


def operation_digest(
    resource: str, arguments_digest: str, schema_version: int, policy_version: str
) -> str:
    """The digest an approval is bound to: the operation, its schema and its policy."""
    return sha256_hex(
        canonical_json(
            {
                "resource": resource,
                "arguments_digest": arguments_digest,
                "schema_version": schema_version,
                "policy_version": policy_version,
            }
        )
    )


@dataclass(frozen=True)
class TimerWait:
    """Wait a fixed duration (or one computed from the context) on a durable timer."""

    duration: Duration | Callable[[Context], Duration]


@dataclass(frozen=True)
class SignalWait:
    """Wait for signal ``name``; after ``timeout`` go to ``on_timeout`` (or fail the run).

    A signal that arrived earlier waits in the inbox and satisfies the wait at once.
    With ``correlation`` (a function of the context, computed when the wait begins),
    only a signal carrying that correlation satisfies it: one with another correlation
    is refused while the wait is open, one for a wait that already closed is refused
    as late, and one that comes before its wait is held until a wait with its
    correlation begins (docs/workflows.md).
    """

    name: str
    timeout: Duration | Callable[[Context], Duration] | None = None
    on_timeout: str | None = None
    correlation: Callable[[Context], str] | None = None


@dataclass(frozen=True)
class Escalation:
    """After ``after`` (from the task's opening; a constant, or computed from the context
    like a task's ``due``) the task goes to ``owner`` and/or ``role`` is added to the
    qualifications that may decide it."""

    after: Duration | Callable[[Context], Duration]
    owner: str | None = None
    role: str | None = None


@dataclass(frozen=True)
class HumanTask:
    """Wait for a qualified person to approve or reject one exact operation.

    ``operation(ctx)`` returns ``{"resource": str, "arguments": <JSON>}``: what an
    approval allows. Its digest (with ``schema_version`` and ``policy_version``) is
    recorded when the task opens, and an approval is accepted only while the
    operation computed from the run's state *now* has that same digest. ``evidence``
    (JSON, default the operation) is what the approver is shown; ``owner`` (a name
    or a function) whom it is assigned to; ``role`` the qualification a decider
    must hold. ``due`` is the SLA, ``reminders`` durations after opening at which
    the owner is reminded, ``escalations`` in order, and ``expires`` when the task
    expires undecided with ``on_expiry``: ``reject``, ``cancel`` or a state name —
    never an approval. ``on_approve`` is the state an approval leads to;
    ``on_reject`` the state a rejection (or a rejecting expiry) leads to, else the
    run fails.

    ``correction`` (a pydantic model) makes it a correction task: an approval must
    carry data valid against the model, which history records and later states read
    as ``ctx.human_tasks[name]["correction"]``; a rejection carries none.
    """

    name: str
    role: str
    operation: Callable[[Context], Any]
    on_approve: str
    expires: Duration | Callable[[Context], Duration]
    owner: str | Callable[[Context], str] = ""
    evidence: Callable[[Context], Any] | None = None
    on_reject: str | None = None
    on_expiry: OnExpiry | str = OnExpiry.REJECT
    due: Duration | Callable[[Context], Duration] | None = None
    reminders: Sequence[Duration] = ()
    escalations: Sequence[Escalation] = ()
    schema_version: int = 1
    policy_version: str = "1"
    correction: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reminders", tuple(self.reminders))
        object.__setattr__(self, "escalations", tuple(self.escalations))


Wait = TimerWait | SignalWait | HumanTask


def correction_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema a correction must satisfy (recorded when the task opens)."""
    return model.model_json_schema()


def _has_sensitive(schema: Any) -> bool:
    """A field flagged ``keel_sensitive`` or typed ``Sensitive[...]`` (which admits a
    ``SealedValue``): docs/secrets.md."""
    if isinstance(schema, dict):
        if schema.get("keel_sensitive") or "SealedValue" in schema.get("$defs", {}):
            return True
        return any(map(_has_sensitive, schema.values()))
    if isinstance(schema, list):
        return any(map(_has_sensitive, schema))
    return False


_EXPIRY = frozenset(OnExpiry)


def _duration_desc(value: Any) -> Any:
    if value is None:
        return None
    if callable(value):
        return callable_fingerprint(value)
    return duration_ms(value)


def describe_wait(wait: Wait | None) -> Any:
    """A wait's part of the definition digest."""
    if isinstance(wait, TimerWait):
        return {"timer": _duration_desc(wait.duration)}
    if isinstance(wait, SignalWait):
        out: dict[str, Any] = {
            "signal": wait.name,
            "timeout": _duration_desc(wait.timeout),
            "on_timeout": wait.on_timeout,
        }
        if wait.correlation is not None:
            out["correlation"] = callable_fingerprint(wait.correlation)
        return out
    if isinstance(wait, HumanTask):
        owner = wait.owner
        desc: dict[str, Any] = {
            "human": wait.name,
            "role": wait.role,
            "owner": owner if isinstance(owner, str) else callable_fingerprint(owner),
            "operation": callable_fingerprint(wait.operation),
            "evidence": callable_fingerprint(wait.evidence),
            "on_approve": wait.on_approve,
            "on_reject": wait.on_reject,
            "on_expiry": str(wait.on_expiry),
            "expires": _duration_desc(wait.expires),
            "due": _duration_desc(wait.due),
            "reminders": [duration_ms(r) for r in wait.reminders],
            "escalations": [[_duration_desc(e.after), e.owner, e.role] for e in wait.escalations],
            "versions": [wait.schema_version, wait.policy_version],
        }
        if wait.correction is not None:  # absent otherwise: older digests hold
            desc["correction"] = {
                "model": wait.correction.__name__,
                "schema": sha256_hex(canonical_json(correction_schema(wait.correction))),
            }
        return desc
    return None


def _check_duration(where: str, value: Any, what: str, positive: bool = False) -> int | None:
    """Milliseconds of a constant duration (None for a computed one), or the definition
    error (``where: exc`` when ``what`` is empty)."""
    if value is None or callable(value):
        return None
    try:
        ms = duration_ms(value)
    except (TypeError, ValueError) as exc:
        prefix = f"{where}: {what}" if what else where
        raise DefinitionError(f"{prefix}: {exc}") from None
    if positive and ms <= 0:
        raise DefinitionError(f"{where}: {what} must be > 0 seconds, got {value!r}")
    return ms


def validate_wait(
    where: str, wait: Any, states: Container[str], check_name: Callable[[str], bool]
) -> None:
    """Raise ``DefinitionError`` unless ``wait`` is a valid wait of a state at ``where``."""
    if wait is None:
        return
    if isinstance(wait, TimerWait):
        _check_duration(where, wait.duration, "")
        return
    if isinstance(wait, SignalWait):
        if not check_name(wait.name):
            raise DefinitionError(f"{where}: invalid signal name {wait.name!r}")
        if wait.on_timeout is not None and wait.timeout is None:
            raise DefinitionError(f"{where}: on_timeout without a timeout")
        if wait.on_timeout is not None and wait.on_timeout not in states:
            raise DefinitionError(f"{where}: on_timeout targets unknown state '{wait.on_timeout}'")
        if wait.correlation is not None and not callable(wait.correlation):
            raise DefinitionError(f"{where}: correlation must be a function of the context")
        _check_duration(where, wait.timeout, "")
        return
    if isinstance(wait, HumanTask):
        _validate_human(where, wait, states, check_name)
        return
    raise DefinitionError(f"{where}: wait must be a TimerWait, a SignalWait or a HumanTask")


def _validate_human(
    where: str, task: HumanTask, states: Container[str], check_name: Callable[[str], bool]
) -> None:
    what = f"{where}: human task '{task.name}'"
    if not isinstance(task.name, str) or not check_name(task.name):
        raise DefinitionError(f"{where}: invalid human task name {task.name!r}")
    if not isinstance(task.role, str) or not task.role:
        raise DefinitionError(f"{what}: role must name the qualification a decider needs")
    if not callable(task.operation):
        raise DefinitionError(f"{what}: operation must be a function of the context")
    if task.evidence is not None and not callable(task.evidence):
        raise DefinitionError(f"{what}: evidence must be a function of the context")
    if not (isinstance(task.owner, str) or callable(task.owner)):
        raise DefinitionError(f"{what}: owner must be a name or a function of the context")
    for target, label in ((task.on_approve, "on_approve"), (task.on_reject, "on_reject")):
        if label == "on_reject" and target is None:
            continue
        if target not in states:
            raise DefinitionError(f"{what}: {label} targets unknown state '{target}'")
    outcome = task.on_expiry
    if not isinstance(outcome, str) or (outcome not in _EXPIRY and outcome not in states):
        raise DefinitionError(
            f"{what}: on_expiry must be 'reject', 'cancel' or a state name, got {outcome!r} "
            "(an expiry never approves)"
        )
    if outcome == task.on_approve or outcome == "approve":
        raise DefinitionError(
            f"{what}: on_expiry {outcome!r} is the approve path; an expiry never approves"
        )
    if isinstance(task.schema_version, bool) or not isinstance(task.schema_version, int):
        raise DefinitionError(f"{what}: schema_version must be an int")
    if not isinstance(task.policy_version, str) or not task.policy_version:
        raise DefinitionError(f"{what}: policy_version must be a non-empty string")
    if task.correction is not None:
        if not (isinstance(task.correction, type) and issubclass(task.correction, BaseModel)):
            raise DefinitionError(f"{what}: correction must be a pydantic model")
        if _has_sensitive(correction_schema(task.correction)):
            raise DefinitionError(
                f"{what}: correction model {task.correction.__name__} has a sensitive field; "
                "a correction is recorded in the clear"
            )
    expires = _check_duration(what, task.expires, "expires", positive=True)
    _check_duration(what, task.due, "due")
    for i, r in enumerate(task.reminders, 1):
        at = _check_duration(what, r, f"reminder {i}", positive=True)
        if expires is not None and at is not None and at >= expires:
            raise DefinitionError(f"{what}: reminder {i} is not before the expiry")
    last = 0
    for i, e in enumerate(task.escalations, 1):
        if not isinstance(e, Escalation):
            raise DefinitionError(f"{what}: escalation {i} must be an Escalation")
        if not e.owner and not e.role:
            raise DefinitionError(f"{what}: escalation {i} names neither an owner nor a role")
        at = _check_duration(what, e.after, f"escalation {i}", positive=True)
        if at is None:  # computed when the task opens; one due past the expiry never fires
            continue
        if at <= last:
            raise DefinitionError(f"{what}: escalation {i} is not later than the one before")
        if expires is not None and at >= expires:
            raise DefinitionError(f"{what}: escalation {i} is not before the expiry")
        last = at
