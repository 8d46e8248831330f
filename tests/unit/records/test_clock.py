"""The clock port: the system clock reads the OS, a manual clock moves only when advanced and
wakes its sleepers, blocking or async, from another thread too (issue 45, item 2)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from orchestrator.records.clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock


def test_both_clocks_are_clocks() -> None:
    assert isinstance(SYSTEM_CLOCK, Clock) and isinstance(ManualClock(), Clock)


def test_the_system_clock_reads_the_wall_and_the_monotonic_clock() -> None:
    clock = SystemClock()
    assert abs(clock.now_ms() - time.time() * 1000) < 1000
    before = clock.monotonic()
    clock.sleep(0)  # no wait
    asyncio.run(clock.sleep_async(-1))
    assert 0 <= clock.monotonic() - before < 1


def test_a_manual_clock_moves_only_when_advanced() -> None:
    clock = ManualClock(start_ms=1_000_000)
    assert (clock.now_ms(), clock.monotonic()) == (1_000_000, 0.0)
    clock.advance(86_400 * 30)  # a 30-day timer, skipped
    clock.advance_ms(5)
    assert clock.now_ms() == 1_000_000 + 30 * 86_400_000 + 5
    assert clock.monotonic() == pytest.approx(30 * 86_400 + 0.005)
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_a_blocked_sleeper_wakes_when_another_thread_advances_past_its_time() -> None:
    clock = ManualClock()
    woke = threading.Event()

    def sleeper() -> None:
        clock.sleep(3600)
        woke.set()

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    while clock.next_wake_s() is None:
        time.sleep(0.001)
    assert clock.next_wake_s() == 3600
    clock.advance(3599)
    assert not woke.wait(0.05)
    clock.advance(1)
    assert woke.wait(5)
    thread.join(5)
    assert clock.next_wake_s() is None


def test_async_sleepers_wake_in_order_and_a_cancelled_one_is_forgotten() -> None:
    clock = ManualClock()

    async def main() -> list[str]:
        woke: list[str] = []

        async def nap(name: str, seconds: float) -> None:
            await clock.sleep_async(seconds)
            woke.append(name)

        tasks = [asyncio.create_task(nap(n, s)) for n, s in (("late", 60), ("soon", 10))]
        gone = asyncio.create_task(nap("cancelled", 5))
        await asyncio.sleep(0)
        assert clock.next_wake_s() == 5
        gone.cancel()
        await asyncio.sleep(0)
        assert clock.next_wake_s() == 10
        clock.advance(10)
        await asyncio.sleep(0.01)
        assert woke == ["soon"]
        # from another thread, as a test driving an engine thread would
        threading.Thread(target=clock.advance, args=(50,)).start()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        await clock.sleep_async(0)  # nothing to wait for
        return woke

    assert asyncio.run(main()) == ["soon", "late"]
