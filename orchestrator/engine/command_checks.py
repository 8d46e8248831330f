"""Checks of a command before the decider sees it, and how a refusal is worded; and the
one seeded bug a test may switch on there (``reopened``).

Kept apart from ``command_loop.py`` (one batch, one transaction) so that module holds the
loop only.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.model.errors import KeelError, LimitExceededError
from orchestrator.domain.model.frozen_init import replace
from orchestrator.domain.model.limits import check_json_text
from orchestrator.domain.model.messages import (
    CompleteActivity,
    SignalWithStart,
    SignalWorkflow,
    StartWorkflow,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import ActivityStatus
from orchestrator.settings import SeededBug

__all__ = ["over_limits", "reason_of", "reopened"]


def reason_of(exc: BaseException) -> str:
    """One line for a dead letter: a Keel error's message, else the exception's type too."""
    text = " ".join(str(exc).split())
    if isinstance(exc, KeelError):  # DecodeError included
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def over_limits(payload: Any) -> str | None:
    """A start's input or a signal's payload past a documented limit (docs/limits.md).

    Checked before deciding, by linear scans that never recurse: a 100k-deep or a
    4,000-digit value is refused here with the limit's message. Malformed JSON is left
    to the decider, which refuses it with its own reason.
    """
    for text, what in _json_values(payload):
        try:
            check_json_text(text, what)
        except LimitExceededError as exc:
            return str(exc)
        except ValueError:
            continue
    return None


def _json_values(payload: Any) -> list[tuple[str, str]]:
    """The client-written JSON values of a command, each with how a refusal names it."""
    if isinstance(payload, StartWorkflow):
        return [(payload.input_json, "the workflow input")]
    if isinstance(payload, SignalWorkflow):
        return [(payload.payload_json, f"signal '{payload.signal_name}' payload")]
    if isinstance(payload, SignalWithStart):
        return [
            (payload.input_json, "the workflow input"),
            (payload.payload_json, f"signal '{payload.signal_name}' payload"),
        ]
    return []


def reopened(bug: SeededBug | None, state: WorkflowState | None, payload: Any) -> Any:
    """The state the decider sees: ``state`` itself, unless the test-only seeded bug
    ``reexecute_on_recovery`` is on (docs/evaluation.md, "A seeded bug"). Then a worker's
    report of an attempt that already completed re-opens it, so the decider records the
    completion again, as an engine that forgot to deduplicate reports would."""
    if bug is not SeededBug.REEXECUTE_ON_RECOVERY or state is None:
        return state
    if type(payload) is not CompleteActivity:
        return state
    act = state.activities.get(payload.activity_id)
    if act is None or act.status != ActivityStatus.COMPLETED or act.attempt != payload.attempt:
        return state
    again = replace(act, status=ActivityStatus.SCHEDULED, result_json=None)
    return replace(state, activities={**state.activities, act.activity_id: again})
