"""The activity lifecycle: dispatch, reports, timeouts, retries, status queries, operators.

A transient failure is retried (same idempotency key, ``attempt + 1``) after a jittered
backoff timer while the step's RetryPolicy allows it (``max_attempts``,
``max_elapsed``), then dead-lettered (``on_exhausted="dead_letter"``: the run needs
attention until a ``RedriveActivity``) or failed (``"fail"``: the state's
``on_failure`` path, else ``WorkflowFailed``). A failure that reports the service's
``retry_after_ms`` (e.g. an HTTP ``Retry-After``) is retried no earlier than that,
capped at ``MAX_RETRY_AFTER_MS``: the timer fires at ``max(backoff, retry_after)``. A
permanent failure, or an error type in ``non_retryable``, takes the failure path at
once. An unknown outcome of a step with a ``status_query`` runs that query first and
never dispatches the write again before it answers: found -> the step completes with
the found result; not found -> retry the same logical attempt; no answer ->
``WorkflowNeedsAttention`` until a ``ResolveActivity`` (:mod:`.activity_operators`).
Without a status query an unknown outcome needs attention too, unless the step declares
``on_unknown="retry"`` (the remote side deduplicates by the key).
Timeouts (schedule-to-start, start-to-close, heartbeat) are durable timers. A
start-to-close or heartbeat timeout leaves the outcome unknown when the step has a status
query or the attempt's ``@side_effect`` handler reported its start (it may have written);
otherwise, and for schedule-to-start (nothing started), it is transient. A late
report of an attempt that timed out is dropped (its outcome is settled by the retry,
the status query or an operator), so one outcome per attempt enters history.

Heartbeats are coalesced: the first of an attempt is recorded (it started); later ones
only when the step has a heartbeat timeout, and at most one per third of it (by the
command's ``recorded_at``), which keeps the deadline at most a third behind the worker.
See docs/activities.md.

The functions here act on a :class:`Decision` (the scratch simulation of one command,
implemented in :mod:`orchestrator.domain.lifecycle.command_handlers`), so this module depends on
nothing above it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from orchestrator.domain.authoring.definitions import (
    DEFAULT_RETRY,
    RetryPolicy,
    Step,
    WorkflowDefinition,
)
from orchestrator.domain.lifecycle import run_scope
from orchestrator.domain.model.errors import CommandRejected, HistoryError, LimitExceededError
from orchestrator.domain.model.fingerprint import canonical_json
from orchestrator.domain.model.keys import child_workflow_id, idempotency_key
from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES, loads_bounded
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityHeartbeat,
    ActivityScheduled,
    ActivityTimedOut,
    CompleteActivity,
    Envelope,
    FailActivity,
    HeartbeatActivity,
    WorkflowNeedsAttention,
)
from orchestrator.domain.model.state import ActivityState, WorkflowState
from orchestrator.domain.model.vocabulary import (
    ActivityStatus,
    FailureClass,
    OnExhausted,
    OnUnknown,
    Resolution,
    TimeoutKind,
    TimerPurpose,
)

__all__ = [
    "FAILURE_CLASSES",
    "MAX_RETRY_AFTER_MS",
    "QUERY_RETRY",
    "QUERY_SEP",
    "RESOLUTIONS",
    "TIMEOUT_ERROR_TYPES",
    "Decision",
    "RunNeedsAttention",
    "UserCodeFailed",
    "activity_timeout",
    "command_json",
    "query_outcome",
    "retry_delay_ms",
]

FAILURE_CLASSES: tuple[FailureClass, ...] = tuple(FailureClass)
#: What an operator may say about an activity whose outcome stayed unknown.
RESOLUTIONS: tuple[Resolution, ...] = tuple(Resolution)
#: Retries of a status query's own transient failures.
QUERY_RETRY = DEFAULT_RETRY
#: ``error_type`` recorded for each kind of timeout (``non_retryable`` may name them).
TIMEOUT_ERROR_TYPES: dict[str, str] = {
    TimeoutKind.SCHEDULE_TO_START: "ScheduleToStartTimeout",
    TimeoutKind.START_TO_CLOSE: "StartToCloseTimeout",
    TimeoutKind.HEARTBEAT: "HeartbeatTimeout",
}
#: The longest wait a failure's ``retry_after_ms`` can impose on the next attempt (1 hour):
#: a service asking for more is retried after this (docs/llm-nodes.md).
MAX_RETRY_AFTER_MS = 3600 * 1000
#: A status query's activity id is ``<activity id>/query/<attempt>``.
QUERY_SEP = "/query/"

_A = ActivityStatus


class UserCodeFailed(Exception):
    """A definition function raised or returned something unusable: deterministic, so
    the run fails with the reason."""


class RunNeedsAttention(Exception):
    """The run itself hit a limit (a computed payload too large, a history too long): it
    stops in ``needs_attention`` with the reason, and writes nothing the broker refuses."""


class Decision(Protocol):
    """What the lifecycle needs from the decision it runs in."""

    defn: WorkflowDefinition
    cmd: Envelope[Any]

    @property
    def s(self) -> WorkflowState: ...

    def emit(self, payload: Any) -> None: ...

    def advance(self) -> None: ...

    def fail_step(self, act: ActivityState, reason: str) -> None: ...

    def arm_timer(self, purpose: TimerPurpose, timer_id: str, fire_at: int) -> None: ...


# -- pure policy --------------------------------------------------------------------------


def retry_delay_ms(policy: RetryPolicy, workflow_id: str, activity_id: str, attempt: int) -> int:
    """Full-jitter backoff after failed ``attempt``: uniform in [0, cap], from a hash.

    The hash covers the workflow id too, so runs of one definition do not retry in lockstep.
    """
    cap = policy.backoff_cap_ms(attempt)
    digest = hashlib.sha256(f"{workflow_id}\x00{activity_id}\x00{attempt}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") * (cap + 1)) >> 64


def activity_timeout(purpose: str) -> tuple[str, str] | None:
    """``(kind, activity_id)`` of an activity timeout timer's purpose, else None."""
    parsed = TimerPurpose.parse(purpose)
    if parsed.timeout is None:
        return None
    return parsed.timeout, parsed.subject


def query_outcome(result_json: str) -> tuple[bool | None, Any, str]:
    """A status query's answer: ``(True, result, "")``, ``(False, None, "")`` or
    ``(None, None, why)`` when it is not ``{"found": true|false, ...}``."""
    try:
        data = json.loads(result_json)
    except ValueError as exc:
        return None, None, f"not JSON: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("found"), bool):
        return None, None, 'expected {"found": true, "result": ...} or {"found": false}'
    if data["found"]:
        return True, data.get("result"), ""
    return False, None, ""


def command_json(text: str, what: str, invalid: str) -> Any:
    """``text`` parsed within the limits (docs/limits.md), else the command is refused."""
    try:
        return loads_bounded(text, what)
    except LimitExceededError as exc:
        raise CommandRejected(str(exc)) from None
    except ValueError as exc:
        raise CommandRejected(f"{invalid}: {exc}") from None


def check_computed(text: str, what: str) -> str:
    """A payload the decider computed (an activity input, an output) must fit a record."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_PAYLOAD_BYTES:
        raise RunNeedsAttention(
            f"{what} is {size:,} bytes; the limit is {MAX_PAYLOAD_BYTES:,} bytes "
            "(store large documents elsewhere and pass a reference)"
        )
    return text


def label(act: ActivityState) -> str:
    """How reasons name an activity: its step, with the index of a fan-out's item."""
    aid = act.activity_id
    name = aid[aid.rindex("/") + 1 :] if aid.endswith("]") else act.step
    return f"step '{name}' ({act.activity_type})"


def step_of(d: Decision, act: ActivityState) -> Step | None:
    """The step whose timeouts and policy govern ``act`` (None for a status query)."""
    if act.parent is not None:
        return None
    return d.defn.step_for(act.activity_id, act.step)


# -- worker reports -------------------------------------------------------------------------


def _report(d: Decision, activity_id: str, attempt: int) -> ActivityState | None:
    """The activity a worker reports on, or None when the report writes nothing.

    Only the report of the attempt in flight is applied. A report of an attempt that
    timed out (its outcome being settled by a retry, a status query or an operator), a
    duplicate, or a stale one is dropped: exactly one outcome per (activity id, attempt)
    enters history (docs/activities.md). One of another run, or of an activity the run
    never scheduled, is refused (``run_scope.own_activity``).
    """
    s = d.s
    if s.is_terminal:
        return None
    act = run_scope.own_activity(d.s, d.cmd, activity_id)
    if act.status != _A.SCHEDULED or act.attempt != attempt:
        return None
    return act


def on_complete(d: Decision, p: CompleteActivity) -> None:
    act = _report(d, p.activity_id, p.attempt)
    if act is None:
        return
    what = f"result of activity '{p.activity_id}'"
    command_json(p.result_json, what, f"{what} is not valid JSON")
    d.emit(ActivityCompleted(p.activity_id, p.attempt, p.result_json, p.schema_version))
    if act.parent is not None:
        _query_answered(d, act, p.result_json)
    else:
        d.advance()


def on_fail(d: Decision, p: FailActivity) -> None:
    act = _report(d, p.activity_id, p.attempt)
    if act is None:
        return
    if p.failure_class not in FAILURE_CLASSES:
        raise CommandRejected(
            f"failure_class of activity '{p.activity_id}' must be one of "
            f"{', '.join(FAILURE_CLASSES)}; got '{p.failure_class[:100]}'"
        )
    if isinstance(p.retry_after_ms, bool) or not isinstance(p.retry_after_ms, int):
        raise CommandRejected(f"retry_after_ms of activity '{p.activity_id}' must be an int")
    if p.retry_after_ms < 0:
        raise CommandRejected(
            f"retry_after_ms of activity '{p.activity_id}' must be >= 0; got {p.retry_after_ms}"
        )
    retry_after = min(p.retry_after_ms, MAX_RETRY_AFTER_MS)
    d.emit(
        ActivityFailed(
            p.activity_id, p.attempt, p.failure_class, p.error_type, p.message, retry_after
        )
    )
    if act.parent is not None and p.failure_class != FailureClass.THROTTLED:
        _query_failed(d, d.s.activities[act.activity_id])
    else:  # a throttled status query waits like any throttled attempt
        after_failure(d, d.s.activities[act.activity_id], retry_after)


def on_heartbeat(d: Decision, p: HeartbeatActivity) -> None:
    s = d.s
    if s.is_terminal:
        return
    act = run_scope.own_activity(s, d.cmd, p.activity_id)
    if act.status != _A.SCHEDULED or act.attempt != p.attempt:
        return  # stale: the attempt ended, timed out or was never sent
    if act.last_heartbeat == d.cmd.message_id:
        return  # redelivered
    step = step_of(d, act)
    hb = step.timeout_ms(TimeoutKind.HEARTBEAT) if step is not None else None
    now = d.cmd.recorded_at
    if act.started:  # coalesce (a redelivery is never later than what it repeats)
        if hb is None:
            return
        deadline = s.timer_index.get(
            str(TimerPurpose.activity_timeout(TimeoutKind.HEARTBEAT, act.activity_id))
        )
        if deadline is not None and now < s.timers[deadline].fire_at - hb + max(1, hb // 3):
            return
    if p.details_json:
        what = f"heartbeat details of activity '{p.activity_id}'"
        command_json(p.details_json, what, f"{what} are not valid JSON")
    d.emit(ActivityHeartbeat(p.activity_id, p.attempt, p.details_json, p.side_effect))
    if step is None:
        return
    s2c = step.timeout_ms(TimeoutKind.START_TO_CLOSE)
    if not act.started and s2c is not None and step.report_start:
        arm_timeout(d, act.activity_id, TimeoutKind.START_TO_CLOSE, f"{p.attempt}", now + s2c)
    if hb is not None:
        count = act.heartbeat_count + 1
        arm_timeout(d, act.activity_id, TimeoutKind.HEARTBEAT, f"{p.attempt}/{count}", now + hb)


# -- attempts, timeouts and failures ----------------------------------------------------------


def schedule_step(
    d: Decision, step: Step, activity_id: str, input_json: str, key: str | None = None
) -> None:
    """The first attempt of a step's activity (a new logical attempt, a new key); a
    child-workflow step's key is the child's workflow id (``key``, or derived)."""
    check_computed(input_json, f"state '{d.s.current_state}': input of step '{step.name}'")
    logical = d.s.logical_attempts.get(step.activity_type, 0) + 1
    if step.child_workflow is not None:
        key = key or child_workflow_id(d.s.workflow_id, activity_id)
    else:
        key = idempotency_key(d.s.workflow_id, step.activity_type, logical)
    dispatch(d, step, step.name, activity_id, step.activity_type, input_json, logical, 1, key)


def dispatch(
    d: Decision,
    step: Step | None,
    step_name: str,
    activity_id: str,
    activity_type: str,
    input_json: str,
    logical_attempt: int,
    attempt: int,
    key: str,
) -> None:
    """Send one attempt and arm the timeouts that run from its dispatch."""
    d.emit(
        ActivityScheduled(
            activity_id=activity_id,
            activity_type=activity_type,
            step=step_name,
            input_json=input_json,
            logical_attempt=logical_attempt,
            attempt=attempt,
            idempotency_key=key,
            heartbeat_ms=step.heartbeat_ms if step is not None else 0,
            report_start=step.report_start if step is not None else False,
        )
    )
    if step is None:
        return
    now = d.cmd.recorded_at
    s2s = step.timeout_ms(TimeoutKind.SCHEDULE_TO_START)
    if s2s is not None:
        arm_timeout(d, activity_id, TimeoutKind.SCHEDULE_TO_START, f"{attempt}", now + s2s)
    s2c = step.timeout_ms(TimeoutKind.START_TO_CLOSE)
    if s2c is not None and not step.report_start:
        arm_timeout(d, activity_id, TimeoutKind.START_TO_CLOSE, f"{attempt}", now + s2c)


def dispatch_again(d: Decision, act: ActivityState) -> None:
    """The next physical attempt of the same logical attempt (same idempotency key)."""
    dispatch(
        d,
        step_of(d, act),
        act.step,
        act.activity_id,
        act.activity_type,
        act.input_json,
        act.logical_attempt,
        act.attempt + 1,
        act.idempotency_key,
    )


def arm_timeout(d: Decision, activity_id: str, kind: TimeoutKind, suffix: str, at: int) -> None:
    purpose = TimerPurpose.activity_timeout(kind, activity_id)
    d.arm_timer(purpose, purpose.timer_id("", suffix), at)


def on_activity_timer(d: Decision, purpose: TimerPurpose) -> None:
    """A retry or timeout timer of an activity fired (its ``TimerFired`` is recorded)."""
    act = d.s.activities[purpose.subject]
    if purpose.timeout is None:  # a retry's backoff is over
        dispatch_again(d, act)
        return
    d.emit(ActivityTimedOut(act.activity_id, act.attempt, purpose.timeout))
    after_failure(d, d.s.activities[act.activity_id])


def after_failure(d: Decision, act: ActivityState, retry_after_ms: int = 0) -> None:
    """``act`` just failed or timed out (its failure fields say how): what next.

    ``retry_after_ms``: the failure asked the next attempt to wait at least this long.
    A throttled attempt never ran: it goes again, whatever its policy says.
    """
    cls = act.failure_class or FailureClass.TRANSIENT
    error_type, message = act.error_type or "", act.error_message or ""
    step = step_of(d, act)
    policy = step.retry_policy if step is not None else DEFAULT_RETRY
    if cls == FailureClass.THROTTLED:
        _retry_or_exhaust(d, act, policy, step, retry_after_ms)
    elif cls == FailureClass.UNKNOWN and step is not None and step.status_query_type is not None:
        _start_query(d, act, step.status_query_type)
    elif cls == FailureClass.PERMANENT:
        d.fail_step(act, f"{label(act)} failed permanently: {error_type}: {message}")
    elif error_type in policy.non_retryable:
        d.fail_step(
            act, f"{label(act)} failed permanently: {error_type} (non-retryable): {message}"
        )
    elif cls == FailureClass.UNKNOWN and (step is None or step.on_unknown != OnUnknown.RETRY):
        d.emit(
            WorkflowNeedsAttention(
                act.activity_id,
                f"the outcome of attempt {act.attempt} of {label(act)} is unknown "
                f"({error_type}: {message}) and the step has no status query: check the "
                f"external system by key '{act.idempotency_key}' and settle it with "
                "keel workflow resolve (a step whose remote side deduplicates by the key "
                "may declare on_unknown='retry')",
            )
        )
    else:
        _retry_or_exhaust(d, act, policy, step, retry_after_ms)


def _retry_or_exhaust(
    d: Decision, act: ActivityState, policy: RetryPolicy, step: Step | None, retry_after_ms: int = 0
) -> None:
    """Retry transient trouble within the policy's bounds, no earlier than
    ``retry_after_ms``; past them, the step's ``on_exhausted`` decides (dead letter or
    the failure path). A throttled attempt (the worker's per-type limits) is dispatched
    again after exactly ``retry_after_ms``, outside ``max_attempts`` and ``max_elapsed``:
    it never ran, so it spends no retry."""
    error_type, message = act.error_type or "", act.error_message or ""
    n = act.attempt
    if act.failure_class == FailureClass.THROTTLED:
        purpose = TimerPurpose.retry(act.activity_id)
        d.arm_timer(purpose, purpose.timer_id("", f"{n}"), d.cmd.recorded_at + retry_after_ms)
        return
    times = "attempt" if n == 1 else "attempts"
    why = f"after {n} {times}"
    if n - act.budget_base < policy.max_attempts:
        backoff = retry_delay_ms(policy, d.s.workflow_id, act.activity_id, n)
        fire_at = d.cmd.recorded_at + max(backoff, retry_after_ms)
        limit = policy.max_elapsed_ms
        if limit is None or fire_at <= act.first_dispatch_at + limit:
            purpose = TimerPurpose.retry(act.activity_id)
            d.arm_timer(purpose, purpose.timer_id("", f"{n}"), fire_at)
            return
        why = f"after {n} {times} (max_elapsed of {limit} ms used up)"
    if step is not None and step.on_exhausted == OnExhausted.DEAD_LETTER:
        d.emit(ActivityDeadLettered(act.activity_id, n, error_type, message))
        return
    d.fail_step(act, f"{label(act)} failed {why}: {error_type}: {message}")


def _start_query(d: Decision, act: ActivityState, query_type: str) -> None:
    """The outcome of ``act`` is unknown: ask before anything is written again."""
    qid = f"{act.activity_id}{QUERY_SEP}{act.attempt}"
    if qid in d.s.activities:  # cannot happen: each attempt is queried once
        raise HistoryError(f"workflow '{d.s.workflow_id}': '{qid}' was queried before")
    logical = d.s.logical_attempts.get(query_type, 0) + 1
    query_input = canonical_json(
        {"idempotency_key": act.idempotency_key, "input": json.loads(act.input_json)}
    )
    check_computed(query_input, f"input of status query '{query_type}'")
    dispatch(
        d,
        None,
        act.step,
        qid,
        query_type,
        query_input,
        logical,
        1,
        idempotency_key(d.s.workflow_id, query_type, logical),
    )


def read_version(d: Decision, step: str) -> int:
    """The schema version of a result given by an operator or a status query: the one
    the step reads now (it is written in today's shape; docs/schema-evolution.md)."""
    declared = d.defn.steps_by_name.get(step)
    return 0 if declared is None else declared.output_schema_version


def _query_answered(d: Decision, query: ActivityState, result_json: str) -> None:
    parent = d.s.activities[query.parent or ""]
    found, result, why = query_outcome(result_json)
    if found:
        d.emit(
            ActivityCompleted(
                parent.activity_id,
                parent.attempt,
                canonical_json(result),
                read_version(d, parent.step),
            )
        )
        d.advance()
    elif found is None:
        d.emit(
            WorkflowNeedsAttention(
                parent.activity_id,
                f"status query '{query.activity_type}' of activity '{parent.activity_id}' "
                f"answered neither found nor not found ({why}); the outcome of attempt "
                f"{parent.attempt} is unknown",
            )
        )
    else:  # the effect did not happen: the same logical attempt may go again
        step = step_of(d, parent)
        policy = step.retry_policy if step is not None else DEFAULT_RETRY
        error_type = parent.error_type or ""
        if error_type in policy.non_retryable:
            d.fail_step(
                parent,
                f"{label(parent)} failed permanently: {error_type} (non-retryable): "
                f"{parent.error_message or ''}",
            )
        else:
            _retry_or_exhaust(d, parent, policy, step)


def _query_failed(d: Decision, query: ActivityState) -> None:
    parent = query.parent or ""
    cls, error_type = query.failure_class, query.error_type or ""
    n = query.attempt
    if cls != FailureClass.PERMANENT and n - query.budget_base < QUERY_RETRY.max_attempts:
        delay = retry_delay_ms(QUERY_RETRY, d.s.workflow_id, query.activity_id, n)
        purpose = TimerPurpose.retry(query.activity_id)
        d.arm_timer(purpose, purpose.timer_id("", f"{n}"), d.cmd.recorded_at + delay)
        return
    how = "failed permanently" if cls == FailureClass.PERMANENT else f"failed after {n} attempts"
    d.emit(
        WorkflowNeedsAttention(
            parent,
            f"status query '{query.activity_type}' of activity '{parent}' {how}: "
            f"{error_type}: {query.error_message or ''}; the outcome of attempt "
            f"{d.s.activities[parent].attempt} is unknown",
        )
    )
