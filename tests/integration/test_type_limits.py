"""The per-type limiter's scripts against the real Redis (``handlers/type_limits.py``):
leases (taken, renewed, released, purged when a worker dies), rate slots and their
reservations, and what ``keel workers`` reads."""

from __future__ import annotations

import asyncio
import threading
import time

from handlers.effects import RedisGate
from handlers.type_limits import (
    RESERVATION_SLACK_MS,
    Admission,
    TypeLimiter,
    read_usage,
)
from orchestrator.application.activity_limits import ActivityLimits, RateLimit
from orchestrator.domain.model.messages import ActivityTask
from orchestrator.io.redis.client_factory import RedisUse, redis_client


def _limiter(settings, lease_ttl_ms: int = 30_000) -> TypeLimiter:
    gate = RedisGate(threading.Event())
    return TypeLimiter(
        redis_client(settings.redis, RedisUse.WORKER_RECORDS),
        settings.topic_prefix,
        gate,
        lease_ttl_ms,
    )


def _granted(a: Admission) -> bool:
    """Run now under a rate alone: no lease, a start in the rate's books."""
    return a.wait_ms is None and a.lease is None and (a.start or "").startswith("g:")


def test_leases_bound_concurrency_and_a_dead_workers_lease_expires(settings):
    limits = ActivityLimits(max_concurrent=2)
    # a lease of 3 s, renewed every second: a 600 ms lease lapsed on a loaded CI machine
    # before the test's first renewal (Redis expires it by the server's clock)
    lim = _limiter(settings, lease_ttl_ms=3000)
    a = lim.admit_now("t", limits, "wf/t/1", 1)
    b = lim.admit_now("t", limits, "wf/t/2", 1)
    assert a.wait_ms is None and b.wait_ms is None and a.lease and b.lease
    full = lim.admit_now("t", limits, "wf/t/3", 1)
    assert full.wait_ms is not None and 250 <= full.wait_ms <= 1000
    assert full.why.startswith("2 of activity 't' already running (max_concurrent)")
    report = full.report(ActivityTask("act-1", "t", "s", "{}", 1, 1, "wf/t/3"))
    assert (report.failure_class, report.error_type, report.retry_after_ms) == (
        "throttled",
        "Throttled",
        full.wait_ms,
    )
    # a later attempt waits longer (a long queue asks less often), up to 8 times
    assert 8 * 250 <= lim.admit_now("t", limits, "wf/t/3", 12).wait_ms <= 8 * 1000  # type: ignore[operator]
    # a renewed lease outlives its ttl; an abandoned one (b: its worker died) expires
    with lim._lock:
        lim._held = {a.lease: a.lease_key}  # type: ignore[dict-item]
    # twice in the same millisecond (the keeper and a caller) both count the held lease
    assert (lim.renew(), lim.renew()) == (1, 1)
    for _ in range(4):  # 4 s: past b's last renewal and its 3 s lease
        time.sleep(1.0)
        assert lim.renew() == 1
    assert read_usage(settings.redis, settings.topic_prefix, {"t": limits})[0].running == 1
    c = lim.admit_now("t", limits, "wf/t/3", 2)
    assert c.wait_ms is None
    assert lim.admit_now("t", limits, "wf/t/4", 1).wait_ms is not None
    asyncio.run(lim.release(a))
    assert lim.admit_now("t", limits, "wf/t/4", 1).wait_ms is None
    lim.gate.stop.set()  # ends the lease keeper


def test_a_rate_reserves_the_next_slot_for_the_key_and_keeps_it(settings):
    limits = ActivityLimits(rate=RateLimit(3, per=2))
    lim = _limiter(settings)
    started = time.monotonic()
    for n in range(3):
        assert _granted(lim.admit_now("r", limits, f"wf/r/{n}", 1))
    late = lim.admit_now("r", limits, "wf/r/3", 1)
    assert late.wait_ms is not None and 1500 <= late.wait_ms <= 2600
    assert late.why.startswith("activity 'r' is over its rate limit of 3/2s; next start reserved")
    # asked again before its slot: the same slot, nothing new reserved
    again = lim.admit_now("r", limits, "wf/r/3", 1)
    assert again.wait_ms is not None and again.wait_ms <= late.wait_ms
    [usage] = read_usage(settings.redis, settings.topic_prefix, {"r": limits})
    assert (usage.started_in_window, usage.reserved) == (3, 1)
    assert 0 < usage.next_start_in_ms <= 2600
    # another key queues behind the reservation, it does not take it
    other = lim.admit_now("r", limits, "wf/r/4", 1)
    assert other.wait_ms is not None and other.wait_ms >= late.wait_ms - 100
    time.sleep(late.wait_ms / 1000 + 0.05)
    assert _granted(lim.admit_now("r", limits, "wf/r/3", 2))  # its reservation
    assert time.monotonic() - started >= 2.0


def test_a_reservation_missed_by_more_than_its_slack_starts_over(settings):
    limits = ActivityLimits(rate=RateLimit(1, per=1))
    lim = _limiter(settings)
    assert _granted(lim.admit_now("s", limits, "wf/s/1", 1))
    late = lim.admit_now("s", limits, "wf/s/2", 1)
    assert late.wait_ms is not None
    time.sleep((late.wait_ms + RESERVATION_SLACK_MS) / 1000 + 0.3)
    # the slot passed long ago: a fresh admission (the window is free again by now)
    assert _granted(lim.admit_now("s", limits, "wf/s/2", 2))
    assert lim.admit_now("s", limits, "wf/s/3", 1).wait_ms is not None


def test_prefixes_do_not_share_limits(settings):
    limits = ActivityLimits(max_concurrent=1)
    gate = RedisGate(threading.Event())
    mine = _limiter(settings)
    theirs = TypeLimiter(
        redis_client(settings.redis, RedisUse.WORKER_RECORDS),
        settings.topic_prefix + "-other",
        gate,
    )
    assert mine.admit_now("u", limits, "k/1", 1).wait_ms is None
    assert theirs.admit_now("u", limits, "k/1", 1).wait_ms is None


def test_a_lapsed_lease_is_not_renewed_even_before_it_is_purged(settings):
    limits = ActivityLimits(max_concurrent=1)
    lim = _limiter(settings)
    a = lim.admit_now("lapsed", limits, "wf/lapsed/1", 1)
    assert a.lease and a.lease_key
    lim.r.zadd(a.lease_key, {a.lease: 1})  # its deadline passed; no admission purged it yet
    assert lim.renew() == 0
    assert lim.r.zscore(a.lease_key, a.lease) == 1.0  # not taken again behind others' backs
    lim.gate.stop.set()


def test_a_lapsed_start_leaves_the_books_and_its_attempt_is_counted_afresh(settings):
    """handlers/type_limits.py, "confirmation": a grant whose call was late is asked again."""
    limits = ActivityLimits(rate=RateLimit(3, per=2))
    lim = _limiter(settings)
    starts = [lim.admit_now("c", limits, f"wf/c/{n}", 1) for n in range(3)]
    assert all(_granted(a) for a in starts)

    def task(n: int, attempt: int = 1) -> ActivityTask:
        return ActivityTask("run#1/step", "c", "step", "{}", 1, attempt, f"wf/c/{n}")

    # its own lapsed start is taken out first: the window holds 3 again, not 4
    again = lim.readmit_now("c", limits, task(2), starts[2])
    assert _granted(again) and again.start != starts[2].start
    [usage] = read_usage(settings.redis, settings.topic_prefix, {"c": limits})
    assert (usage.started_in_window, usage.reserved) == (3, 0)
    # a fourth start that lapsed meets a full window: throttled, its slot reserved
    late = lim.readmit_now("c", limits, task(3), Admission(start="g:wf/c/3/1/gone"))
    assert late.wait_ms is not None and 1000 <= late.wait_ms <= 2600
    assert late.why.startswith("activity 'c' is over its rate limit of 3/2s; next start reserved")
    [usage] = read_usage(settings.redis, settings.topic_prefix, {"c": limits})
    assert (usage.started_in_window, usage.reserved) == (3, 1)
