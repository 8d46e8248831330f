"""The clock port: the one way time enters a Keel process (docs/architecture.md, "Time").

The engine, worker, projector, connector, schedules and client waits are given a
:class:`Clock` by their composition root instead of reading ``time`` themselves, so a
test can drive a :class:`ManualClock` and skip an hour-long timer in a millisecond instead
of sleeping through it (the test kit of issue 46 builds its time skipping on it). The pure
domain reads no clock at all: time reaches it as the recorded ``now`` of a decision.

It sits beside the envelope factory because every process and adapter may import
``orchestrator.records``; it loads nothing but the standard library.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """What a process asks of time: the epoch it records, the interval it measures, a wait."""

    def now_ms(self) -> int:
        """Epoch milliseconds: what an event records as ``recorded_at`` and timers compare."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go backwards: timeouts, intervals, deadlines of waits."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block this thread for ``seconds`` of this clock's time."""
        ...

    async def sleep_async(self, seconds: float) -> None:
        """Suspend this task for ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The wall clock and the OS monotonic clock: what the CLI gives every process."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


#: The default of every constructor that takes a clock: stateless, so one is enough.
SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told: :meth:`advance` wakes whoever sleeps past the mark.

    Thread-safe: a test thread may advance it while an engine thread blocks in :meth:`sleep`
    or a task on another event loop awaits :meth:`sleep_async`. :meth:`next_wake_s` tells a
    time-skipping driver how far to jump for the next sleeper to wake.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        #: Epoch ms at monotonic 0; the wall clock's now unless given (a fixed start keeps
        #: recorded times reproducible).
        self._epoch_ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        self._elapsed = 0.0
        self._cond = threading.Condition()
        self._order = itertools.count()
        #: (wake at, order, loop, future) of async sleepers; blocking ones wait on _cond.
        self._waiters: list[tuple[float, int, asyncio.AbstractEventLoop, asyncio.Future[None]]]
        self._waiters = []
        self._blocked: list[float] = []

    def now_ms(self) -> int:
        with self._cond:
            return self._epoch_ms + int(self._elapsed * 1000)

    def monotonic(self) -> float:
        with self._cond:
            return self._elapsed

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and wake every sleeper whose time has come."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        with self._cond:
            self._elapsed += seconds
            due: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
            while self._waiters and self._waiters[0][0] <= self._elapsed:
                _, _, loop, fut = heapq.heappop(self._waiters)
                due.append((loop, fut))
            self._cond.notify_all()
        for loop, fut in due:
            loop.call_soon_threadsafe(_wake, fut)

    def advance_ms(self, ms: int) -> None:
        self.advance(ms / 1000)

    def next_wake_s(self) -> float | None:
        """Seconds until the earliest sleeper wakes (0 if one is due), None if none sleeps."""
        with self._cond:
            wakes = [w[0] for w in self._waiters if not w[3].done()] + self._blocked
            return max(0.0, min(wakes) - self._elapsed) if wakes else None

    def sleep(self, seconds: float) -> None:
        with self._cond:
            until = self._elapsed + seconds
            self._blocked.append(until)
            try:
                self._cond.wait_for(lambda: self._elapsed >= until)
            finally:
                self._blocked.remove(until)

    async def sleep_async(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cond:
            until = self._elapsed + seconds
            if until <= self._elapsed:
                return
            heapq.heappush(self._waiters, (until, next(self._order), loop, fut))
        await fut

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self.now_ms()})"


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # a cancelled sleeper's future is already done
        fut.set_result(None)
