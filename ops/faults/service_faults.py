"""The faults a test or ``keel evaluate`` names in ``KEEL_ADAPTER_HOOKS`` (``MODULE:ATTR``
of this module), each an :class:`~orchestrator.io.adapter_hooks.AdapterHooks`:

- :data:`reexecute_on_recovery`, the seeded bug (docs/evaluation.md, "A seeded bug"): a
  starting worker runs every task of its partitions again, and the orchestrator records a
  report of an attempt that already completed as if it were new, as an engine that forgot
  to deduplicate reports would. ``keel evaluate`` must call such a build unsafe.
- :func:`pause_after_ack`: the connector pauses ``KEEL_FAULT_PAUSE_S`` seconds after
  Kafka acknowledged a webhook, before marking it delivered (a SIGKILL lands there).
- :func:`pause_after_store`: a worker's LLM step pauses ``KEEL_FAULT_PAUSE_S`` seconds
  after storing a fresh provider response, before reporting (a SIGKILL lands there).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, TypeVar, cast

from orchestrator.domain.model.frozen_init import replace
from orchestrator.domain.model.messages import CompleteActivity
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import ActivityStatus
from orchestrator.io.adapter_hooks import AdapterHooks
from orchestrator.io.ports import GroupIntake, Record

__all__ = [
    "PAUSE_VARIABLE",
    "SeededBug",
    "hooks_of",
    "pause_after_ack",
    "pause_after_store",
    "reexecute_on_recovery",
    "reopened",
]

log = logging.getLogger("keel.faults")
T = TypeVar("T")
#: Seconds a pause fault waits.
PAUSE_VARIABLE = "KEEL_FAULT_PAUSE_S"


class SeededBug(StrEnum):
    """The bugs ``keel evaluate --seeded-bug`` can seed (docs/evaluation.md)."""

    REEXECUTE_ON_RECOVERY = "reexecute_on_recovery"


def reopened(state: WorkflowState | None, payload: Any) -> WorkflowState | None:
    """The state a buggy decider sees: a worker's report of an attempt that already
    completed re-opens it, so the completion is recorded again."""
    if state is None or type(payload) is not CompleteActivity:
        return state
    act = state.activities.get(payload.activity_id)
    if act is None or act.status != ActivityStatus.COMPLETED or act.attempt != payload.attempt:
        return state
    again = replace(act, status=ActivityStatus.SCHEDULED, result_json=None)
    return replace(state, activities={**state.activities, act.activity_id: again})


class _ReopeningDecider:
    """The real decider, fed :func:`reopened` states."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def handle(self, state: WorkflowState | None, cmd: Any, now: int) -> Any:
        return self._inner.handle(reopened(state, cmd.payload), cmd, now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _ReplayOnceIntake:
    """The real task consumer, except that its first batch sends it back to the start of
    every partition it holds: each task an earlier worker ran runs again."""

    def __init__(self, inner: GroupIntake) -> None:
        self._inner = inner
        self._assigned: set[int] = set()
        self._replayed = False

    def subscribe(
        self, on_assign: Callable[[list[int]], None], on_revoke: Callable[[list[int]], None]
    ) -> None:
        def assigned(partitions: list[int]) -> None:
            self._assigned.update(partitions)
            on_assign(partitions)

        def revoked(partitions: list[int]) -> None:
            self._assigned.difference_update(partitions)
            on_revoke(partitions)

        self._inner.subscribe(assigned, revoked)

    def poll(self, max_records: int, timeout: float) -> list[Record]:
        records = self._inner.poll(max_records, timeout)
        if not records or self._replayed or not self._assigned:
            return records
        log.warning("seeded bug: every task of partitions %s runs again", sorted(self._assigned))
        for partition in sorted(self._assigned):
            self._inner.rewind(partition, 0)
        self._replayed = True
        return []

    def commit(self, offsets: Mapping[int, int]) -> None:
        self._inner.commit(offsets)

    def rewind(self, partition: int, offset: int) -> None:
        self._inner.rewind(partition, offset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Reexecution(AdapterHooks):
    def decider(self, decider: T) -> T:
        return cast(T, _ReopeningDecider(decider))

    def task_intake(self, intake: GroupIntake) -> GroupIntake:
        return cast(GroupIntake, _ReplayOnceIntake(intake))


#: The seeded bug ``reexecute_on_recovery``, for both the orchestrator and the worker.
reexecute_on_recovery = _Reexecution()


def hooks_of(bug: SeededBug) -> str:
    """The ``KEEL_ADAPTER_HOOKS`` value that seeds ``bug``."""
    return f"{__name__}:{bug.value}"


def _pause_s(environ: Mapping[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    try:
        seconds = float(env.get(PAUSE_VARIABLE, ""))
    except ValueError:
        raise ValueError(f"{PAUSE_VARIABLE} must be a number of seconds") from None
    if not 0 < seconds <= 600:
        raise ValueError(f"{PAUSE_VARIABLE} must be in (0, 600], got {seconds:g}")
    return seconds


class _PausingProducer:
    def __init__(self, inner: Any, seconds: float) -> None:
        self._inner = inner
        self._seconds = seconds

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, Any]]
    ) -> None:
        await self._inner.send(topic, key, value, headers)
        log.warning("fault: pausing %.1f s after Kafka's ack", self._seconds)
        await asyncio.sleep(self._seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PausingStore:
    def __init__(self, inner: Any, seconds: float) -> None:
        self._inner = inner
        self._seconds = seconds

    async def put_call(
        self, attempt_key: str, index: int | str, record: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        stored, fresh = await self._inner.put_call(attempt_key, index, record)
        if fresh:
            log.warning("fault: pausing %gs after storing call %s", self._seconds, index)
            await asyncio.sleep(self._seconds)
        return stored, fresh

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PauseAfterAck(AdapterHooks):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def command_producer(self, producer: T) -> T:
        return cast(T, _PausingProducer(producer, self.seconds))

    def __repr__(self) -> str:
        return f"pause_after_ack({self.seconds:g}s)"


class _PauseAfterStore(AdapterHooks):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def llm_call_store(self, store: T) -> T:
        return cast(T, _PausingStore(store, self.seconds))

    def __repr__(self) -> str:
        return f"pause_after_store({self.seconds:g}s)"


def pause_after_ack() -> AdapterHooks:
    """The connector pauses ``KEEL_FAULT_PAUSE_S`` seconds after each Kafka ack."""
    return _PauseAfterAck(_pause_s())


def pause_after_store() -> AdapterHooks:
    """An LLM step pauses ``KEEL_FAULT_PAUSE_S`` seconds after storing a fresh response."""
    return _PauseAfterStore(_pause_s())
