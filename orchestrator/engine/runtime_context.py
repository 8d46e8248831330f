"""What the orchestrator's concerns share: ports, topics, owned partitions, counters.

``command_loop``, ``recovery`` and ``orchestrator`` each hold one :class:`RuntimeContext`
instead of reaching into each other, so each file reads on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine.budget import RetryBudget
from orchestrator.engine.owned import OrchestratorStats, PartitionState
from orchestrator.io.ports import CommandIntake, EventLog, TimerIndex
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.clock import SYSTEM_CLOCK, Clock

__all__ = ["RuntimeContext", "Topics"]


@dataclass(frozen=True, slots=True)
class Topics:
    commands: str
    events: str
    activity_tasks: str
    snapshots: str
    dlq: str

    @classmethod
    def for_prefix(cls, topic: Callable[[str], str]) -> Topics:
        return cls(
            *(topic(k) for k in ("commands", "events", "activity-tasks", "snapshots", "dlq"))
        )


@dataclass
class RuntimeContext:
    decider: Any
    codec: Codec
    topics: Topics
    log: EventLog
    intake: CommandIntake
    timers: TimerIndex
    budget: RetryBudget
    stopping: Callable[[], bool]
    #: Where decisions, timer due checks and checkpoints read the time (a ManualClock in tests).
    clock: Clock = SYSTEM_CLOCK
    finished_capacity: int = 1000
    #: Runs ``local=True`` steps in-process (``local_activities.LocalActivities``); None:
    #: every step goes to the workers.
    local: Any = None
    stats: OrchestratorStats = field(default_factory=OrchestratorStats)
    partitions: dict[int, PartitionState] = field(default_factory=dict)

    def new_partition(self) -> PartitionState:
        return PartitionState(self.codec, self.finished_capacity)
