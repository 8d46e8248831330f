"""The application a test environment runs: the user's, with some handlers stubbed and
failures scripted in front of any of them.

The user's :class:`~orchestrator.application.app.KeelApp` is never changed: the kit runs
a shallow copy whose handler table has each stub in its activity's place (the input and
output models and the ``@side_effect`` mark kept, so the worker runs a stub exactly as it
runs the real handler) and every handler behind a :class:`FailurePlan`, which raises the
exceptions a test scripted before (or after) the call. The worker classifies what is
raised like any handler's exception: a scripted ``TransientError`` is retried with
backoff, a ``PermanentError`` fails the step, an ``OutcomeUnknownError`` sends the run
through the step's status query. Per-type limits are left out: they live in Redis.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from handlers.sdk.markers import has_side_effect, side_effect
from orchestrator.application.app import ActivityHandler, KeelApp
from orchestrator.domain.model.errors import DefinitionError

__all__ = ["ActivityRef", "FailurePlan", "ScriptedFailure", "activity_type_of", "stubbed_app"]

#: How a test names an activity: its type, or the handler function registered for it.
ActivityRef = str | Callable[..., Any]


def activity_type_of(app: KeelApp, ref: ActivityRef) -> str:
    """The activity type ``ref`` names in ``app``; ``DefinitionError`` naming the known ones."""
    if isinstance(ref, str):
        if ref in app.handlers or ref in app.external_activities:
            return ref
    else:
        for activity_type, handler in app.handlers.items():
            if handler.fn is ref or getattr(handler.fn, "__wrapped__", None) is ref:
                return activity_type
    known = ", ".join(sorted({*app.handlers, *app.external_activities})) or "(none)"
    shown = ref if isinstance(ref, str) else getattr(ref, "__qualname__", repr(ref))
    raise DefinitionError(f"the application has no activity {shown!r}; known: {known}")


@dataclass(frozen=True)
class ScriptedFailure:
    """One exception to raise on a call of an activity: before the handler runs, or after
    it returned (its write happened, then the answer was lost)."""

    error: BaseException
    after_call: bool = False


class FailurePlan:
    """Scripted failures by activity type, taken in order, one per call; thread-safe (a sync
    handler runs on the worker's pool)."""

    def __init__(self) -> None:
        self._queued: dict[str, deque[ScriptedFailure]] = {}
        self._lock = threading.Lock()
        #: Calls that reached each activity type (scripted failures included).
        self.calls: dict[str, int] = {}

    def add(self, activity_type: str, failure: ScriptedFailure, times: int) -> None:
        with self._lock:
            self._queued.setdefault(activity_type, deque()).extend([failure] * times)

    def pending(self, activity_type: str) -> int:
        with self._lock:
            return len(self._queued.get(activity_type, ()))

    def take(self, activity_type: str) -> ScriptedFailure | None:
        with self._lock:
            self.calls[activity_type] = self.calls.get(activity_type, 0) + 1
            queued = self._queued.get(activity_type)
            return queued.popleft() if queued else None


def _behind_plan(handler: ActivityHandler, fn: Callable[..., Any], plan: FailurePlan) -> Any:
    """``fn`` as the handler of ``handler``'s type, with the plan's failures in front."""
    activity_type = handler.activity_type

    if inspect.iscoroutinefunction(fn):

        async def run_async(arg: Any) -> Any:
            failure = plan.take(activity_type)
            if failure is not None and not failure.after_call:
                raise failure.error
            result = await fn(arg)
            if failure is not None:
                raise failure.error
            return result

        wrapped: Callable[..., Any] = run_async
    else:

        def run(arg: Any) -> Any:
            failure = plan.take(activity_type)
            if failure is not None and not failure.after_call:
                raise failure.error
            result = fn(arg)
            if failure is not None:
                raise failure.error
            return result

        wrapped = run
    wrapped.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapped.__qualname__ = getattr(fn, "__qualname__", activity_type)
    if has_side_effect(handler.fn) or has_side_effect(fn):
        side_effect(wrapped)
    return wrapped


def stubbed_app(
    app: KeelApp, stubs: Mapping[ActivityRef, Callable[..., Any]], plan: FailurePlan
) -> KeelApp:
    """A copy of ``app`` whose handlers are the stubs where given, every one behind ``plan``.

    A stub may stand for a declared external activity (``app.declare_activity``) too: it
    then takes and returns plain JSON values.
    """
    by_type = {activity_type_of(app, ref): stub for ref, stub in stubs.items()}
    for activity_type, stub in by_type.items():
        if not callable(stub):
            raise DefinitionError(f"the stub of activity '{activity_type}' is not callable")
    derived = copy.copy(app)
    handlers: dict[str, ActivityHandler] = {}
    for activity_type in sorted({*app.handlers, *by_type}):
        original = app.handlers.get(activity_type) or ActivityHandler(
            activity_type, by_type[activity_type], None, None, False
        )
        fn = by_type.get(activity_type, original.fn)
        handlers[activity_type] = dataclasses.replace(
            original,
            fn=_behind_plan(original, fn, plan),
            is_async=inspect.iscoroutinefunction(fn),
            limits=None,
        )
    derived.handlers = handlers
    derived.external_activities = set(app.external_activities) - set(by_type)
    derived._decider = None
    return derived
