"""Committed events handed from the orchestrator to an in-process projector.

The projector thread of ``keel orchestrator`` used to learn of each event by reading it
back from ``keel.events``: one more fetch after the commit, and a second decode of every
event. Now the orchestrator publishes what a transaction committed (the decoded
envelopes, with their partitions and offsets) right after the commit returns, and the
projector folds them at once (docs/performance.md, "Where the projector runs").

The topic stays the source of truth: the projector still consumes it (a record it has
already folded in-process is skipped without decoding) and commits its offsets there, so
a crash, an overflow of this channel or a projector in another process loses nothing,
and the read model stays rebuildable from the topic.

A channel is per events topic and per process (:func:`channel`), like a logger: the
orchestrator publishes only while a projector listens, and a channel never blocks its
publisher — past ``max_events`` waiting, it drops what waits and the projector reads
those events from the topic instead.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.domain.model.frozen_init import fast_init
from orchestrator.domain.model.messages import Envelope
from orchestrator.domain.model.state import WorkflowState

__all__ = [
    "MAX_WAITING_EVENTS",
    "CommittedEvent",
    "CommittedEvents",
    "CommittedSink",
    "HandedRecord",
    "channel",
]

#: Events a channel holds for a projector that fell behind before it drops them.
MAX_WAITING_EVENTS = 50_000


@fast_init
@dataclass(frozen=True, slots=True)
class CommittedEvent:
    """One event of a committed transaction; ``offset`` is -1 when it is not known.

    ``state`` is the run's state after this event when the orchestrator hands it over
    (on the last event of each run in a transaction): the fold of the run's events, which
    the projector then need not compute again. States are sealed, never mutated.
    """

    partition: int
    offset: int
    envelope: Envelope[Any]
    state: WorkflowState | None = None
    #: The record's value as written (for a projector in another process).
    value: bytes | None = None
    #: The offset of the record this one follows on its partition: the orchestrator's
    #: previous event there (-1: not known, e.g. the first since it took the partition).
    #: Only transaction markers and aborted records lie between the two, so a reader
    #: that has every record up to ``follows`` has every record up to this one.
    follows: int = -1


class HandedRecord(Protocol):
    """What a projector in another process is handed of one event: its record."""

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def follows(self) -> int: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def envelope(self) -> Envelope[Any]: ...


class CommittedSink(Protocol):
    """Where an orchestrator publishes what it committed: this module's in-process
    channel, or a pipe to a projector in a child process (``committed_pipe.py``)."""

    @property
    def listening(self) -> bool: ...

    def open_publisher(self) -> None: ...

    def close_publisher(self) -> None: ...

    def publish(self, events: list[CommittedEvent]) -> None: ...


class CommittedEvents:
    """A bounded, never-blocking hand-off of committed events between two threads."""

    def __init__(self, max_events: int = MAX_WAITING_EVENTS) -> None:
        self.max_events = max_events
        self._cond = threading.Condition(threading.Lock())
        self._waiting: deque[list[CommittedEvent]] = deque()
        #: ``time.monotonic()`` of each waiting batch's publication (oldest first).
        self._published_at: deque[float] = deque()
        #: When the oldest batch the last :meth:`take` returned was published (the
        #: projector's in-process lag is measured from it).
        self.taken_since = 0.0
        self._count = 0
        self._listeners = 0
        self._publishers = 0
        #: Events dropped because nobody took them in time (the topic still has them).
        self.dropped = 0
        self.published = 0
        #: Set by a publisher while a transaction is on its way (a pipe's reader that has
        #: bytes not yet decoded): the projector then waits for it before the topic.
        self.arriving = False

    @property
    def listening(self) -> bool:
        return self._listeners > 0

    @property
    def publishing(self) -> bool:
        """An orchestrator of this process is running and publishes here."""
        return self._publishers > 0

    def expecting(self) -> bool:
        """Committed events wait here or are on their way."""
        return self.arriving or bool(self._waiting)

    def open_publisher(self) -> None:
        with self._cond:
            self._publishers += 1

    def close_publisher(self) -> None:
        with self._cond:
            self._publishers = max(0, self._publishers - 1)

    def listen(self) -> None:
        with self._cond:
            self._listeners += 1

    def unlisten(self) -> None:
        with self._cond:
            self._listeners = max(0, self._listeners - 1)
            if not self._listeners:
                self._drop()

    def publish(self, events: list[CommittedEvent]) -> None:
        """Hand over one transaction's events (in commit order); never blocks."""
        if not events or not self._listeners:
            return
        with self._cond:
            if self._count + len(events) > self.max_events:
                self._drop()
            self._waiting.append(events)
            self._published_at.append(time.monotonic())
            self._count += len(events)
            self.published += len(events)
            self._cond.notify_all()

    def take(self, timeout_s: float) -> list[CommittedEvent]:
        """Everything waiting (oldest first), after waiting up to ``timeout_s`` for some."""
        with self._cond:
            if not self._waiting and timeout_s > 0:
                self._cond.wait(timeout_s)
            if not self._waiting:
                return []
            batches, self._waiting = self._waiting, deque()
            self.taken_since = self._published_at[0]
            self._published_at.clear()
            self._count = 0
        if len(batches) == 1:
            return batches[0]
        return [ev for batch in batches for ev in batch]

    def _drop(self) -> None:
        self.dropped += self._count
        self._waiting.clear()
        self._published_at.clear()
        self._count = 0


_channels: dict[str, CommittedEvents] = {}
_channels_lock = threading.Lock()


def channel(events_topic: str) -> CommittedEvents:
    """This process's channel of ``events_topic`` (created on first use)."""
    with _channels_lock:
        found = _channels.get(events_topic)
        if found is None:
            found = _channels[events_topic] = CommittedEvents()
        return found
