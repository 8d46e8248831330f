"""Per-type limits across every worker: concurrent executions and a start rate, in Redis.

An activity type declared with ``max_concurrent`` or ``rate_limit``
(``orchestrator/application/activity_limits.py``) is admitted here before its handler
runs; docs/limits.md ("Per-type limits") is the user's page. Each check is one Lua
script, so two workers never both take the last slot, and the clock is Redis's own
(``TIME``), so workers' clocks never disagree:

* **concurrency**: a lease per running attempt in ``lim:conc:<type>``, a sorted set
  scored by expiry. Expired leases (a worker SIGKILLed mid-call) are purged on every
  admission; a running attempt's lease is renewed every third of its lifetime by a
  thread (a sync handler may hold the event loop) and released when it ends.
* **rate**: ``lim:rate:<type>`` holds each start as an interval, scored by its end: a
  granted start lasts ``start_slack_ms`` (its call reaching the service), a reserved one
  covers ``[T, T + RESERVATION_SLACK_MS + start_slack_ms]``. A start is placed where no
  window of ``per`` meets more than ``count`` intervals: at once if fewer than ``count``
  intervals end inside the last window, else at ``T`` = the ``count``-th latest end +
  ``per``, *reserved* for this idempotency key (``lim:rsv:<K>``). The re-dispatched
  attempt of the key arriving in ``[T, T + RESERVATION_SLACK_MS]`` takes its reservation
  (shrunk to its real start); earlier, it waits again for ``T``; later, it starts over.
  So the service sees at most ``count`` calls in any window of ``per``, however late
  a dispatch arrives, provided each call reaches the service within its slack of the
  grant.
* **confirmation**: that proviso is the worker's to keep. Between the grant and the
  handler's call the worker still claims a side effect's key (a thread hop through the
  gate, queued behind the whole batch's admissions and claims), reports its start and
  waits for the event loop; nothing bounds that, and in a burst on a loaded machine (the
  backlog an orchestrator restart releases) it can take longer than the slack, so calls
  granted in one window reach the service in the next. So a granted start is confirmed
  just before its handler is called: one whose grant is older than half its slack (timed
  from before the script ran) is taken out of the books and admitted again, and one now
  over the limit is reported ``throttled`` without calling the handler (a side effect's
  claim released).

A task over a limit never sleeps in the worker's batch (which would hold the batch's
offsets past the poll interval): it is reported ``throttled`` with the wait, and the
orchestrator dispatches it again after it without spending a retry. While Redis is
away, admissions wait through the worker's :class:`~handlers.effects.RedisGate`.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import redis

from handlers.effects import RedisGate
from orchestrator.application.activity_limits import ActivityLimits
from orchestrator.application.app import KeelApp
from orchestrator.domain.model.messages import ActivityTask, FailActivity
from orchestrator.domain.model.vocabulary import FailureClass
from orchestrator.io.ports import Stopping
from orchestrator.io.redis.client_factory import REDIS_AWAY, RedisUse, is_cluster, redis_client
from orchestrator.io.redis.keyspace import Keyspace

__all__ = [
    "LEASE_TTL_MS",
    "RESERVATION_SLACK_MS",
    "START_SLACK_MS",
    "START_SLACK_SHARE",
    "Admission",
    "StartLapsed",
    "TypeLimiter",
    "TypeUsage",
    "read_usage",
    "start_slack_ms",
]

log = logging.getLogger("keel.worker.limits")

#: A running attempt's lease lives this long unless renewed (every third of it).
LEASE_TTL_MS = 30_000
#: How long a granted start counts as starting (its call reaching the service): this, or
#: a twentieth of the limit's window when that is longer (:func:`start_slack_ms`).
START_SLACK_MS = 500
#: The share of a rate's window a start counts as lasting, at least ``START_SLACK_MS``.
START_SLACK_SHARE = 20
#: A granted start must reach its handler within its slack divided by this, timed from
#: before the admission asked Redis; the rest of the slack is the handler's own way to
#: the service. Past it the start is admitted again (:meth:`TypeLimiter.confirm`).
CONFIRM_SHARE = 2
#: How late after its slot a re-dispatched attempt may still take its reservation.
RESERVATION_SLACK_MS = 3_000
#: The wait of an attempt over ``max_concurrent``: uniform in this range (ms), times the
#: attempt number up to ``_CONCURRENCY_BACKOFF_CAP``, so a long queue asks less often.
CONCURRENCY_WAIT_MS = (250, 1000)
_CONCURRENCY_BACKOFF_CAP = 8

# KEYS: concurrency zset, rate zset, reservation key. ARGV: max_concurrent (0: none),
# count (0: none), per_ms, lease id, lease ttl, start slack, reservation slack, the
# concurrency wait, the idempotency key, and a lapsed start of this attempt to take out
# of the rate's books first ('' for none: see "confirmation"). Returns {verdict, wait_ms}.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_conc, count, per = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, slack, pad = ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[7])
if max_conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= max_conc then
    return {'concurrency', tonumber(ARGV[8])}
  end
end
if count > 0 then
  if ARGV[10] ~= '' then
    redis.call('ZREM', KEYS[2], ARGV[10])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - per)
  local mine = 'r:' .. ARGV[9]
  local reserved = redis.call('GET', KEYS[3])
  local granted = false
  if reserved then
    local at = tonumber(reserved)
    if now < at then
      redis.call('PEXPIRE', KEYS[3], at - now + pad + per)
      return {'rate', at - now}
    end
    redis.call('DEL', KEYS[3])
    redis.call('ZREM', KEYS[2], mine)
    if now <= at + pad then
      granted = true
    end
  end
  if not granted and redis.call('ZCARD', KEYS[2]) >= count then
    local kth = redis.call('ZREVRANGE', KEYS[2], count - 1, count - 1, 'WITHSCORES')
    local at = tonumber(kth[2]) + per
    if at > now then
      redis.call('ZADD', KEYS[2], at + pad + slack, mine)
      redis.call('SET', KEYS[3], at, 'PX', at - now + pad + per)
      return {'rate', at - now}
    end
  end
  redis.call('ZADD', KEYS[2], now + slack, 'g:' .. lease)
end
if max_conc > 0 then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), lease)
end
return {'run', 0}
"""

# KEYS: the concurrency zsets; ARGV[1]: ttl, then one lease per key. Only a lease still
# held and not lapsed is renewed (one purged or expired after a stall is not taken again
# behind others' backs). Counted by ZSCORE, not by ZADD's CH: a lease renewed twice in one
# millisecond (the keeper thread and a caller) is unchanged by the second and CH says 0.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local renewed = 0
for i, key in ipairs(KEYS) do
  local until_ms = redis.call('ZSCORE', key, ARGV[i + 1])
  if until_ms and tonumber(until_ms) > now then
    redis.call('ZADD', key, 'XX', now + tonumber(ARGV[1]), ARGV[i + 1])
    renewed = renewed + 1
  end
end
return renewed
"""


@dataclass(frozen=True, slots=True)
class Admission:
    """What the limiter said: ``wait_ms`` None to run now (holding ``lease`` on the
    concurrency set ``lease_key`` when the type has ``max_concurrent``), else throttled.

    A start granted under a rate is ``start`` in the rate's books; its handler must be
    called by ``call_by`` (the limiter's monotonic clock) or the start is asked again.
    """

    wait_ms: int | None = None
    why: str = ""
    lease: str | None = None
    lease_key: str | None = None
    start: str | None = None
    call_by: float = math.inf

    def report(self, task: ActivityTask) -> FailActivity:
        """The ``throttled`` failure the worker reports instead of running ``task``."""
        return FailActivity(
            task.activity_id,
            task.attempt,
            str(FailureClass.THROTTLED),
            "Throttled",
            self.why,
            self.wait_ms or 0,
        )


FREE = Admission()


class StartLapsed(Exception):
    """A granted start that lapsed before its handler was called and is now over the
    limit: raised just before the call, caught by the worker, reported ``throttled``."""

    def __init__(self, admission: Admission) -> None:
        super().__init__(admission.why)
        self.admission = admission


def start_slack_ms(per_ms: int) -> int:
    """How long a start of a rate of window ``per_ms`` counts as starting.

    A fixed half second held 10/min only while every call reached the service within half
    a second of its admission; a loaded machine (a worker's first call, its imports and
    session) took longer, and the service saw 11 calls in one minute. A twentieth of the
    window covers such delays where the window is long and costs at most 5% of its rate.
    """
    return max(START_SLACK_MS, per_ms // START_SLACK_SHARE)


@dataclass(frozen=True, slots=True)
class TypeUsage:
    """One limited type's use now (``keel workers``)."""

    activity_type: str
    limits: ActivityLimits
    running: int
    started_in_window: int
    reserved: int
    next_start_in_ms: int


class TypeLimiter:
    """The per-type limits of one worker's tasks (see the module doc)."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        gate: RedisGate,
        lease_ttl_ms: int = LEASE_TTL_MS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.r = client
        #: Times a grant until its handler's call (a test's clock makes one lapse).
        self.monotonic = monotonic
        self.keys = Keyspace(prefix, clustered=is_cluster(client))
        self.gate = gate
        self.lease_ttl_ms = lease_ttl_ms
        self._admit = client.register_script(_ADMIT)
        self._renew = client.register_script(_RENEW)
        self._held: dict[str, str] = {}  # lease -> its concurrency key
        self._lock = threading.Lock()
        self._keeper: threading.Thread | None = None

    @classmethod
    def from_url(cls, url: str, prefix: str, gate: RedisGate) -> TypeLimiter:
        return cls(redis_client(url, RedisUse.WORKER_RECORDS), prefix, gate)

    # -- the worker's side ---------------------------------------------------------------
    async def admit(self, app: KeelApp, task: ActivityTask) -> Admission:
        """Run ``task`` now, or the wait: a type without limits never asks Redis."""
        handler = app.handlers.get(task.activity_type)
        if handler is None or handler.limits is None:
            return FREE
        return await self.gate.call(
            "limits",
            self.admit_now,
            task.activity_type,
            handler.limits,
            task.idempotency_key,
            task.attempt,
        )

    def admit_now(
        self, activity_type: str, limits: ActivityLimits, idempotency_key: str, attempt: int
    ) -> Admission:
        """One admission (the script); a lease taken is renewed until :meth:`release`."""
        admission = self._ask(activity_type, limits, idempotency_key, attempt, lapsed=None)
        if admission.wait_ms is not None or limits.max_concurrent is None:
            return admission
        lease = admission.lease
        assert lease is not None
        key = self.keys.concurrency(activity_type)
        with self._lock:
            self._held[lease] = key
            self._start_keeper()
        return replace(admission, lease_key=key)

    async def confirm(self, app: KeelApp, task: ActivityTask, admission: Admission) -> Admission:
        """Just before ``task``'s handler is called: ``admission`` while its start is fresh,
        else a new admission under the rate only (the concurrency lease is kept); raises
        :class:`StartLapsed` when that one is throttled."""
        if admission.start is None or self.monotonic() <= admission.call_by:
            return admission
        handler = app.handler(task.activity_type)
        assert handler.limits is not None
        again = await self.gate.call(
            "limits", self.readmit_now, task.activity_type, handler.limits, task, admission
        )
        if again.wait_ms is not None:
            raise StartLapsed(again)
        return again

    def readmit_now(
        self, activity_type: str, limits: ActivityLimits, task: ActivityTask, lapsed: Admission
    ) -> Admission:
        """The lapsed start out of the books and the attempt admitted again (the script)."""
        log.info(
            "start of %s attempt %d lapsed before its call; admitted again",
            task.idempotency_key,
            task.attempt,
        )
        rate_only = replace(limits, max_concurrent=None)
        again = self._ask(activity_type, rate_only, task.idempotency_key, task.attempt, lapsed)
        return replace(again, lease=lapsed.lease, lease_key=lapsed.lease_key)

    def _ask(
        self,
        activity_type: str,
        limits: ActivityLimits,
        idempotency_key: str,
        attempt: int,
        lapsed: Admission | None,
    ) -> Admission:
        lease = f"{idempotency_key}/{attempt}/{uuid.uuid4().hex[:12]}"
        low, high = CONCURRENCY_WAIT_MS
        wait = int(random.uniform(low, high) * min(max(attempt, 1), _CONCURRENCY_BACKOFF_CAP))
        rate = limits.rate
        slack = start_slack_ms(rate.per_ms) if rate is not None else START_SLACK_MS
        asked_at = self.monotonic()  # before Redis's clock is read: the grant is younger
        verdict, wait_ms = self._admit(
            keys=[
                self.keys.concurrency(activity_type),
                self.keys.rate(activity_type),
                self.keys.reservation(activity_type, idempotency_key),
            ],
            args=[
                limits.max_concurrent or 0,
                rate.count if rate is not None else 0,
                rate.per_ms if rate is not None else 0,
                lease,
                self.lease_ttl_ms,
                slack,
                RESERVATION_SLACK_MS,
                wait,
                idempotency_key,
                (lapsed.start or "") if lapsed is not None else "",
            ],
        )
        if verdict == "concurrency":
            why = f"{limits.max_concurrent} of activity '{activity_type}' already running"
            return Admission(int(wait_ms), f"{why} (max_concurrent); waits {wait_ms} ms")
        if verdict == "rate":
            why = f"activity '{activity_type}' is over its rate limit of {rate}"
            return Admission(int(wait_ms), f"{why}; next start reserved in {wait_ms} ms")
        if rate is None:
            return Admission(lease=lease) if limits.max_concurrent is not None else FREE
        call_by = asked_at + slack / CONFIRM_SHARE / 1000
        held = lease if limits.max_concurrent is not None else None
        return Admission(lease=held, start=f"g:{lease}", call_by=call_by)

    async def release(self, admission: Admission) -> None:
        """The attempt ended: its lease goes (when stopping with Redis away, it expires)."""
        if admission.lease is None:
            return
        with self._lock:
            self._held.pop(admission.lease, None)
        try:
            await self.gate.call("release", self.r.zrem, admission.lease_key, admission.lease)
        except Stopping:
            log.warning("lease %s not released (stopping, Redis unreachable)", admission.lease)

    def renew(self) -> int:
        """Renew every lease this worker holds; how many were still held."""
        with self._lock:
            held = list(self._held.items())
        by_key: dict[str, list[str]] = {}
        for lease, key in held:
            by_key.setdefault(key, []).append(lease)
        # one script per type's leases: in a cluster each type's keys are a slot of their own
        return sum(
            int(self._renew(keys=[key] * len(leases), args=[self.lease_ttl_ms, *leases]))
            for key, leases in by_key.items()
        )

    def _start_keeper(self) -> None:
        if self._keeper is None or not self._keeper.is_alive():
            self._keeper = threading.Thread(target=self._keep, name="keel-leases", daemon=True)
            self._keeper.start()

    def _keep(self) -> None:
        """Renew the leases every third of their lifetime until the worker stops."""
        while not self.gate.stop.wait(self.lease_ttl_ms / 3000):
            try:
                self.renew()
            except REDIS_AWAY as exc:  # the lease may lapse: another worker may start one
                log.warning("leases not renewed (%s); retrying", type(exc).__name__)


def read_usage(url: str, prefix: str, limited: dict[str, ActivityLimits]) -> list[TypeUsage]:
    """What each limited type uses now, read without changing anything (``keel workers``)."""
    r = redis_client(url, RedisUse.WORKER_RECORDS)
    keys = Keyspace(prefix, clustered=is_cluster(r))
    seconds, micros = r.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    rows = []
    for activity_type, limits in limited.items():
        running = 0
        if limits.max_concurrent is not None:
            running = int(r.zcount(keys.concurrency(activity_type), now, "+inf"))
        started = reserved = next_ms = 0
        if limits.rate is not None:
            per = limits.rate.per_ms
            entries = cast(
                "list[tuple[Any, float]]",
                r.zrangebyscore(keys.rate(activity_type), now - per, "+inf", withscores=True),
            )
            reserved = sum(1 for member, _ in entries if str(member).startswith("r:"))
            started = len(entries) - reserved
            if len(entries) >= limits.rate.count:
                ends = sorted((score for _, score in entries), reverse=True)
                next_ms = max(0, int(ends[limits.rate.count - 1]) + per - now)
        rows.append(TypeUsage(activity_type, limits, running, started, reserved, next_ms))
    return rows
