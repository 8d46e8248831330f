"""The worker's threads for synchronous handlers and Redis calls, and the cheap hand-off
to and from them.

A sync handler runs on a thread so that it holds neither the batch's other tasks nor the
heartbeats (docs/activities.md, "How a worker runs handlers"). ``run_in_executor`` and
``asyncio.to_thread`` pay for that per call twice over: a ``concurrent.futures.Future``
chained to an asyncio one, and a ``call_soon_threadsafe`` (a write to the loop's
self-pipe, a wake-up) for every result. Here a job is a small object on a ``SimpleQueue``;
a thread that finishes one puts it on a ``deque`` and wakes the loop only if no wake-up
is pending yet, so a burst of results reaches its futures in one callback. That halves
what a call costs the worker (docs/performance.md, "The worker's hand-off").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

from orchestrator.io.ports import Stopping

T = TypeVar("T")

#: The name every handler thread's name starts with (``keel-handler-3``).
THREAD_PREFIX = "keel-handler"


@dataclass(slots=True)
class _Job:
    """One call: what to run, in which context, and where its outcome goes."""

    future: asyncio.Future[Any]
    context: contextvars.Context
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    result: Any = None
    error: BaseException | None = None


class ThreadHandoff:
    """Blocking calls on up to ``size`` threads, their outcomes handed back to ``loop``.

    A thread is started when a call finds none free (up to ``size``) and then waits for
    the next call; a burst of outcomes reaches the awaiting tasks in one wake-up of the
    loop.
    """

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self.size = size
        self.loop = loop
        self.name = name
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._done: deque[_Job] = deque()
        #: A delivery is scheduled on the loop and has not begun draining ``_done``.
        self._wake_pending = False
        self._threads: list[threading.Thread] = []
        #: Calls submitted and not yet delivered; read and written on the loop's thread only.
        self._in_flight = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on a thread, in a copy of the caller's context; call on the loop."""
        if self._closed:
            raise Stopping(f"the worker's {self.name} threads are closed")
        future: asyncio.Future[T] = self.loop.create_future()
        self._jobs.put(_Job(future, contextvars.copy_context(), fn, args))
        self._in_flight += 1
        started = len(self._threads)
        if self._in_flight > started and started < self.size:
            name = f"{self.name}-{started}"
            thread = threading.Thread(target=self._serve, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()
        return future

    def _serve(self) -> None:
        jobs, done = self._jobs, self._done
        while True:
            job = jobs.get()
            if job is None:
                return
            try:
                job.result = job.context.run(job.fn, *job.args)
            except StopIteration as exc:  # an asyncio future refuses StopIteration itself
                job.error = RuntimeError(f"the call raised StopIteration: {exc}")
            except BaseException as exc:  # handed to the awaiting task, as an executor would
                job.error = exc
            done.append(job)
            if not self._wake_pending:
                self._wake_pending = True
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
                    self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        """On the loop: every finished job's outcome to its future (cancelled ones skipped)."""
        self._wake_pending = False  # before draining: a job added from here on wakes again
        done = self._done
        while done:
            job = done.popleft()
            self._in_flight -= 1
            if job.future.done():
                continue
            if job.error is not None:
                job.future.set_exception(job.error)
            else:
                job.future.set_result(job.result)

    def close(self, wait: bool = False) -> None:
        """Let the threads go once their calls return; a call not yet started is cancelled.

        ``wait``: return only when every thread has ended, so a call still running (its
        batch abandoned) is never cut off by the process's exit: the threads are daemons,
        and an executor's were joined at exit.
        """
        self._closed = True
        while True:
            try:
                job = self._jobs.get_nowait()
            except Empty:
                break
            if job is not None and not self.loop.is_closed():
                job.future.cancel()
        for _ in self._threads:
            self._jobs.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


class HandlerThreads:
    """A worker's bounded pool for synchronous handlers, so they run side by side.

    Called on the event loop, a sync handler would hold the whole batch (every other
    task, every heartbeat) until it returns. A task takes a ``slot()`` before it starts
    (its start report, its effect claim) and keeps it until its handler has returned, so
    at most ``size`` sync handlers run at once, never more than the pool's threads, and
    a task still waiting for a thread has claimed and reported nothing. Everything but
    the handler (claims, reports, the sink) stays on ``loop``'s thread (``on_loop``).
    """

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self.size = size
        self.loop = loop
        self._slots = asyncio.Semaphore(size)
        self._handoff = ThreadHandoff(size, loop, THREAD_PREFIX)

    def slot(self) -> asyncio.Semaphore:
        return self._slots

    async def run(self, fn: Callable[[Any], T], arg: Any) -> T:
        """``fn(arg)`` on a pool thread, in a copy of the caller's context: the handler
        sees its ``activity()`` and the task's span as it would on the loop."""
        return await self._handoff.submit(fn, arg)

    def on_loop(self, fn: Callable[[str], None]) -> Callable[[str], None]:
        """``fn`` run on the loop's thread whoever calls it (a sync handler's heartbeat).

        The calling thread waits for it, so what ``fn`` raises (``Stopping``) reaches the
        handler as it would on the loop; a loop no longer running raises ``Stopping``.
        """

        def call(arg: str) -> None:
            try:
                here = asyncio.get_running_loop() is self.loop
            except RuntimeError:  # no loop runs in this thread
                here = False
            if here:
                fn(arg)
                return
            done: Future[None] = Future()

            def run() -> None:
                try:
                    fn(arg)
                except Exception as exc:
                    done.set_exception(exc)
                else:
                    done.set_result(None)

            try:
                self.loop.call_soon_threadsafe(run)
            except RuntimeError:  # the loop is closed
                raise Stopping("the worker stopped during a heartbeat") from None
            while True:
                try:
                    done.result(timeout=1.0)
                    return
                except TimeoutError:
                    if not self.loop.is_running():  # the batch was abandoned
                        raise Stopping("the worker stopped during a heartbeat") from None

        return call

    def close(self, wait: bool = False) -> None:
        """Let the threads go; a batch waits for its handlers, so none is running unless
        the batch was abandoned (``wait``: until that handler has returned).

        A call not yet started is cancelled (its task was abandoned with its batch).
        """
        self._handoff.close(wait)
