"""RedisGate: waits out an outage with bounded backoff, logs each change once, honours stop."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import redis
from redis.sentinel import MasterNotFoundError

from handlers.effects import RedisGate
from orchestrator.io.ports import Stopping
from orchestrator.records.clock import ManualClock


class Flaky:
    """Fails with ``error`` the first ``failures`` calls, then answers ``"ok"``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self, *args: object) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_an_outage_is_waited_out_and_logged_once_each_way(caplog):
    gate = RedisGate(threading.Event(), initial_s=0.001, max_s=0.004)
    flaky = Flaky(6, redis.ConnectionError("Connection refused"))

    async def two_tasks() -> list[str]:
        return list(await asyncio.gather(gate.call("claim", flaky), gate.call("commit", flaky)))

    with caplog.at_level(logging.WARNING, logger="keel.worker.effects"):
        assert asyncio.run(two_tasks()) == ["ok", "ok"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("Redis unreachable (claim: ConnectionError): effect claims paused")
    assert lines[1].startswith("Redis reachable again after ")
    assert lines[1].endswith("s: effect claims resumed")
    assert gate.outages == 1
    assert not gate.is_down


def test_timeouts_count_as_an_outage_but_other_errors_are_raised():
    gate = RedisGate(threading.Event(), initial_s=0.001, max_s=0.002)
    assert asyncio.run(gate.call("claim", Flaky(2, redis.TimeoutError("timed out")))) == "ok"
    with pytest.raises(redis.ResponseError):
        asyncio.run(gate.call("claim", Flaky(1, redis.ResponseError("WRONGTYPE"))))


class Failover:
    """A Sentinel failover as a client meets it: the dead master's connection, no master
    elected yet, a demoted master refusing a script's write; then the new master answers."""

    def __init__(self) -> None:
        self.errors: list[Exception] = [
            redis.ConnectionError("Connection closed by server."),
            MasterNotFoundError("No master found for 'keel'"),
            redis.ReadOnlyError("You can't write against a read only replica."),
        ]

    def __call__(self, *args: object) -> str:
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_a_sentinel_failover_is_one_outage_waited_out_not_an_error(caplog):
    gate = RedisGate(threading.Event(), initial_s=0.001, max_s=0.002)
    with caplog.at_level(logging.WARNING, logger="keel.worker.effects"):
        assert asyncio.run(gate.call("claim", Failover())) == "ok"
    assert gate.outages == 1 and not gate.is_down
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("Redis unreachable (claim: ConnectionError): effect claims paused")
    assert lines[1].startswith("Redis reachable again after ")


def test_backoff_grows_and_is_bounded(monkeypatch):
    slept: list[float] = []

    async def record(self, seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(RedisGate, "_sleep", record)
    gate = RedisGate(threading.Event(), initial_s=0.05, max_s=2.0)
    asyncio.run(gate.call("claim", Flaky(9, redis.ConnectionError("refused"))))
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]


def test_the_backoff_waits_on_the_injected_clock_which_a_test_skips(caplog):
    """0.5 + 1 + 2 + 2 s of backoff, skipped by advancing a manual clock: no sleeping."""
    clock = ManualClock()
    gate = RedisGate(threading.Event(), initial_s=0.5, max_s=2.0, clock=clock)

    async def skip_time() -> str:
        call = asyncio.create_task(gate.call("claim", Flaky(4, redis.ConnectionError("refused"))))
        while not call.done():
            wake = clock.next_wake_s()
            if wake is None:  # the call runs on a thread: let it come back
                await asyncio.sleep(0.001)
            else:
                clock.advance(wake)
                await asyncio.sleep(0)
        return await call

    with caplog.at_level(logging.WARNING, logger="keel.worker.effects"):
        assert asyncio.run(asyncio.wait_for(skip_time(), 10)) == "ok"
    assert clock.monotonic() == pytest.approx(5.5)
    assert caplog.records[-1].getMessage().startswith("Redis reachable again after 5.5s")


def test_a_stop_ends_the_wait():
    stop = threading.Event()
    gate = RedisGate(stop, initial_s=0.01, max_s=0.05)
    never = Flaky(10**9, redis.ConnectionError("refused"))

    async def stop_soon() -> None:
        await asyncio.sleep(0.05)
        stop.set()

    async def run() -> None:
        await asyncio.gather(gate.call("claim", never), stop_soon())

    with pytest.raises(Stopping, match=r"stopping while Redis is unreachable \(claim\)"):
        asyncio.run(run())


def test_the_gate_stops_with_the_ports_one_stopping():
    from handlers import effects

    assert effects.Stopping is Stopping
