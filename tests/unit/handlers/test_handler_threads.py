"""The sync handlers' pool on its own: outcomes reach the right callers, threads stay
within the bound, a burst of results wakes the loop less than once a result, and a
closed pool starts nothing more."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from handlers.effects import RedisGate
from handlers.handler_threads import THREAD_PREFIX, HandlerThreads, ThreadHandoff
from orchestrator.io.ports import Stopping

who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_every_call_gets_its_own_result_on_at_most_size_threads() -> None:
    seen: set[str] = set()

    def double(n: int) -> int:
        seen.add(threading.current_thread().name)
        return n * 2

    async def main() -> list[int]:
        pool = HandlerThreads(4, asyncio.get_running_loop())
        try:
            return list(await asyncio.gather(*(pool.run(double, n) for n in range(500))))
        finally:
            pool.close()

    assert asyncio.run(main()) == [n * 2 for n in range(500)]
    assert 1 <= len(seen) <= 4
    assert all(name.startswith(f"{THREAD_PREFIX}-") for name in seen)


def test_calls_one_after_another_need_one_thread() -> None:
    async def main() -> set[str]:
        pool = HandlerThreads(16, asyncio.get_running_loop())
        try:
            return {await pool.run(lambda _: threading.current_thread().name, n) for n in range(50)}
        finally:
            pool.close()

    assert asyncio.run(main()) == {f"{THREAD_PREFIX}-0"}


def test_calls_run_side_by_side_up_to_the_size() -> None:
    barrier = threading.Barrier(3, timeout=5.0)

    def meet(n: int) -> int:
        barrier.wait()  # breaks (and raises) unless three calls are inside at once
        return n

    async def main() -> list[int]:
        pool = HandlerThreads(3, asyncio.get_running_loop())
        try:
            return list(await asyncio.gather(*(pool.run(meet, n) for n in range(3))))
        finally:
            pool.close()

    assert asyncio.run(main()) == [0, 1, 2]


def test_what_a_handler_raises_reaches_its_caller_alone() -> None:
    def maybe(n: int) -> int:
        if n == 3:
            raise ValueError("three is refused")
        if n == 4:
            raise StopIteration("four")
        return n

    async def main() -> list[Any]:
        pool = HandlerThreads(2, asyncio.get_running_loop())
        try:
            return list(
                await asyncio.gather(
                    *(pool.run(maybe, n) for n in range(6)), return_exceptions=True
                )
            )
        finally:
            pool.close()

    out = asyncio.run(main())
    assert out[:3] == [0, 1, 2] and out[5] == 5
    assert isinstance(out[3], ValueError) and str(out[3]) == "three is refused"
    assert isinstance(out[4], RuntimeError)
    assert str(out[4]) == "the call raised StopIteration: four"


def test_the_handler_sees_the_callers_context() -> None:
    def read(_: None) -> str:
        return who.get()

    async def main() -> str:
        pool = HandlerThreads(1, asyncio.get_running_loop())
        who.set("task-7")
        try:
            return await pool.run(read, None)
        finally:
            pool.close()

    assert asyncio.run(main()) == "task-7"


def test_a_burst_of_results_wakes_the_loop_fewer_times_than_it_has_results() -> None:
    """The point of the pool: one wake-up delivers every result finished by then. The
    loop is held until all eight handlers have returned, as a busy worker's loop is."""
    gate = threading.Event()
    returned = threading.Semaphore(0)

    def held(n: int) -> int:
        gate.wait(5.0)
        returned.release()
        return n

    async def main() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        wakes = 0
        real = loop.call_soon_threadsafe

        def counted(*args: Any, **kw: Any) -> Any:
            nonlocal wakes
            wakes += 1
            return real(*args, **kw)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        pool = HandlerThreads(8, loop)
        try:
            calls = asyncio.gather(*(pool.run(held, n) for n in range(8)))
            await asyncio.sleep(0)  # every call handed over and waiting at the gate
            gate.set()
            for _ in range(8):  # the loop's thread busy meanwhile
                assert returned.acquire(timeout=5.0)
            return list(await calls), wakes
        finally:
            pool.close()

    results, wakes = asyncio.run(main())
    assert results == list(range(8))
    assert wakes < 8, f"{wakes} wake-ups for 8 results"


def test_a_closed_pool_cancels_calls_not_started_and_refuses_new_ones() -> None:
    started = threading.Event()
    gate = threading.Event()

    def held(n: int) -> int:
        started.set()
        gate.wait(5.0)
        return n

    async def main() -> None:
        pool = HandlerThreads(1, asyncio.get_running_loop())
        first = asyncio.ensure_future(pool.run(held, 1))
        second = asyncio.ensure_future(pool.run(held, 2))
        await asyncio.sleep(0)
        assert await asyncio.to_thread(started.wait, 5.0)
        pool.close()
        gate.set()
        assert await first == 1  # it had started: it runs to its end
        with pytest.raises(asyncio.CancelledError):
            await second
        with pytest.raises(Stopping, match=r"^the worker's keel-handler threads are closed$"):
            await pool.run(held, 3)

    asyncio.run(main())


def test_the_redis_gate_runs_its_calls_on_the_hand_off_it_is_given() -> None:
    def name(_: None) -> str:
        return threading.current_thread().name

    async def main() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        handoff = ThreadHandoff(2, loop, "keel-redis")
        try:
            given = await RedisGate(threading.Event(), handoff=handoff).call("name", name, None)
            default = await RedisGate(threading.Event()).call("name", name, None)
            return given, default
        finally:
            handoff.close()

    given, default = asyncio.run(main())
    assert given.startswith("keel-redis-")
    assert not default.startswith("keel-redis-")  # asyncio.to_thread's default executor


@pytest.mark.parametrize("wait", [True, False])
def test_close_with_wait_returns_only_once_a_running_call_has_returned(wait: bool) -> None:
    """The threads are daemons: a worker that exits must wait for a running handler (the
    docs promise a stop never interrupts one), as an executor's join at exit did."""
    started = threading.Event()
    gate = threading.Event()
    order: list[str] = []

    def held(n: int) -> int:
        started.set()
        gate.wait(5.0)
        order.append("handler returned")
        return n

    async def main() -> None:
        pool = HandlerThreads(1, asyncio.get_running_loop())
        running = asyncio.ensure_future(pool.run(held, 1))
        await asyncio.sleep(0)
        assert await asyncio.to_thread(started.wait, 5.0)

        def close() -> None:
            pool.close(wait=wait)
            order.append("closed")

        closer = threading.Thread(target=close)
        closer.start()
        # a bound, not a wait for an event: closing must not end while the handler runs
        await asyncio.to_thread(closer.join, 0.5)
        gate.set()
        await asyncio.to_thread(closer.join, 5.0)
        assert await running == 1

    asyncio.run(main())
    if wait:
        assert order == ["handler returned", "closed"]
    else:
        assert order == ["closed", "handler returned"]
