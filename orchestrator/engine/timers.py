"""The in-memory timer heap of one orchestrator process.

Timers are durable because they are *state* (``TimerScheduled`` events folded into
each workflow); this heap is only an index over the workflows this process owns,
rebuilt on every partition assignment. Entries are never removed eagerly: a popped
timer that the workflow no longer holds (it fired, or its wait ended) is skipped.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(order=True, slots=True)
class _Entry:
    fire_at: int
    workflow_id: str = field(compare=False)
    timer_id: str = field(compare=False)
    partition: int = field(compare=False)


class TimerHeap:
    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._armed: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, partition: int, workflow_id: str, timer_id: str, fire_at: int) -> None:
        """Index a timer once; arming the same (workflow, timer) again is a no-op. An
        entry may so hold an earlier arming's time: the loop fires a timer only at or
        after the ``fire_at`` its run holds, and re-arms it at that time otherwise."""
        key = (workflow_id, timer_id)
        if key in self._armed:
            return
        self._armed.add(key)
        heapq.heappush(self._heap, _Entry(fire_at, workflow_id, timer_id, partition))

    def next_due_in_ms(self, now_ms: int) -> int | None:
        return max(0, self._heap[0].fire_at - now_ms) if self._heap else None

    def pop_due(self, now_ms: int, limit: int = 1000) -> list[tuple[int, str, str]]:
        """(partition, workflow_id, timer_id) of timers due at ``now_ms``, earliest first."""
        due: list[tuple[int, str, str]] = []
        while self._heap and self._heap[0].fire_at <= now_ms and len(due) < limit:
            e = heapq.heappop(self._heap)
            self._armed.discard((e.workflow_id, e.timer_id))
            due.append((e.partition, e.workflow_id, e.timer_id))
        return due

    def drop_partitions(self, partitions: set[int]) -> None:
        kept = [e for e in self._heap if e.partition not in partitions]
        self._armed = {(e.workflow_id, e.timer_id) for e in kept}
        heapq.heapify(kept)
        self._heap = kept
