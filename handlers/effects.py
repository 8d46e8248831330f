"""The effect store: one Redis record per side effect, keyed by the idempotency key.

A handler that writes to the outside world is marked ``@side_effect``. Before it runs,
the worker claims the key (``pending``, with the physical attempt); after it returns,
it records the result (``committed``). So:

* a task redelivered after the effect committed returns the recorded result and never
  calls out again;
* a task redelivered while its own attempt is still ``pending`` (the worker died
  mid-call) does not call out blindly either: its outcome is *unknown*, and the
  orchestrator runs the activity's status query before anything is repeated;
* a retry the orchestrator decided on (a higher attempt) may claim the key again, and
  from then on an older attempt still queued somewhere is *stale* and never runs;
* a handler that returned a result Keel cannot use (wrong shape, over a limit) has
  still run to completion, so its write happened: the key is recorded ``refused`` with
  the raw result, and every later task of the key reports that same permanent failure
  instead of calling out a second time.

Only a definite failure raised by the handler itself (transient or permanent, never
unknown) releases the claim. Records live under ``Keyspace.effect`` (``fx``), which no
rebuild clears, and outlive the retry horizon (TTL). While Redis is unreachable the
worker pauses claims (:class:`RedisGate`) instead of failing the attempt, so an outage
costs time, never a retry; and the external system also deduplicates by the same key.
In a Sentinel group or a Redis Cluster every record is on a replica before the worker acts
on it (``WAIT``, in a cluster on the connection to the master of the record's slot), so the
master's loss does not lose it (docs/operations.md, "Redis high availability").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar, cast

import redis
from redis.commands.core import Script
from redis.exceptions import MovedError, NoScriptError

from handlers.handler_threads import ThreadHandoff
from orchestrator.config.redis_url import RedisTopology, topology_of
from orchestrator.domain.model.errors import UnavailableError

# The gate raises the ports' one ``Stopping`` when the worker stops while Redis is away:
# the task is abandoned (and redelivered).
from orchestrator.io.ports import Stopping
from orchestrator.io.redis.client_factory import REDIS_AWAY, RedisUse, is_cluster, redis_client
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.records.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("keel.worker.effects")

T = TypeVar("T")

DEFAULT_TTL_S = 14 * 24 * 3600
#: The raw result kept with a refused effect, for the operator (characters).
MAX_RAW_CHARS = 64 * 1024
#: In a Sentinel group or a cluster, the replicas that must hold an effect record before a
#: worker acts on it, and how long a write waits for them before it counts as "Redis away".
SENTINEL_REPLICA_ACKS = 1
REPLICA_ACK_TIMEOUT_MS = 500
#: A cluster node's own client: Redis away, or the slot moved to another master.
_SLOT_AWAY: tuple[type[BaseException], ...] = (*REDIS_AWAY, MovedError)


class ClaimOutcome(StrEnum):
    RUN = "run"
    COMMITTED = "committed"
    REFUSED = "refused"
    IN_DOUBT = "in_doubt"
    STALE = "stale"


class EffectState(StrEnum):
    PENDING = "pending"
    COMMITTED = "committed"
    REFUSED = "refused"
    RELEASED = "released"


# Atomically: committed or refused -> the effect happened, return what was recorded; an
# attempt older than one already claimed is stale (the orchestrator moved past it);
# pending by this very attempt -> in doubt, unless this very call claimed it before (the
# reply was lost in an outage); otherwise claim for this attempt.
_BEGIN = """
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'committed' then
  return {'committed', redis.call('HGET', KEYS[1], 'result')}
end
if state == 'refused' then
  return {'refused', redis.call('HGET', KEYS[1], 'refusal')}
end
local attempt = tonumber(ARGV[1])
local top = tonumber(redis.call('HGET', KEYS[1], 'top') or '0')
if attempt < top then
  return {'stale', tostring(top)}
end
if state == 'pending' and top == attempt then
  if redis.call('HGET', KEYS[1], 'owner') == ARGV[3] then
    -- written again, so a replica acknowledgement (WAIT) asked for on another connection
    -- than the first call's still covers the claim
    redis.call('HSET', KEYS[1], 'owner', ARGV[3])
    return {'run', ''}
  end
  return {'in_doubt', tostring(top)}
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempt', ARGV[1], 'top', ARGV[1],
           'owner', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return {'run', ''}
"""

# Record how a claimed call ended (committed or refused): ARGV[1] the TTL, then field/value
# pairs; in one script, so the record and its TTL change together.
_SETTLE = """
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# Release only the claim this attempt holds: a later attempt's claim is never touched.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'state') == 'pending'
   and (ARGV[1] == '' or redis.call('HGET', KEYS[1], 'top') == ARGV[1]) then
  redis.call('HSET', KEYS[1], 'state', 'released')
  return 1
end
return 0
"""


@dataclass(frozen=True)
class Claim:
    """``run``: go ahead; ``committed``: ``result_json`` is the recorded result;
    ``refused``: the handler ran but its result was refused (``error_type``, ``message``);
    ``in_doubt``: an earlier dispatch of this attempt started and never finished;
    ``stale``: a later attempt was already claimed, so this one must not run."""

    outcome: str
    result_json: str | None = None
    error_type: str | None = None
    message: str | None = None


class ReplicaAckMissing(UnavailableError, redis.ConnectionError):
    """No replica acknowledged an effect record in time. A failover now could promote a
    replica without it, so the record is not yet safe to act on: the call counts as "Redis
    away" and the worker's gate repeats it (a repeat by the same caller is harmless)."""


class EffectStore:
    """The effect records of one topic prefix (see the module doc).

    ``replica_acks``: in a Sentinel group (1 by :meth:`from_url`), every write returns only
    once that many replicas hold it (Redis ``WAIT`` on the writing connection), so the
    replica Sentinel promotes after the master's loss (the one furthest ahead) has every
    record a worker acted on. 0 (one server): no wait.
    """

    def __init__(
        self, client: redis.Redis, prefix: str, ttl_s: int = DEFAULT_TTL_S, replica_acks: int = 0
    ) -> None:
        self.r = client
        self.keys = Keyspace(prefix)
        self.ttl_s = ttl_s
        self.replica_acks = replica_acks
        #: Cluster masters last seen with no replica attached (warned of once each).
        self._alone: set[str] = set()
        self._begin = client.register_script(_BEGIN)
        self._settle = client.register_script(_SETTLE)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, prefix: str) -> EffectStore:
        replicated = topology_of(url) in (RedisTopology.SENTINEL, RedisTopology.CLUSTER)
        acks = SENTINEL_REPLICA_ACKS if replicated else 0
        return cls(redis_client(url, RedisUse.WORKER_RECORDS), prefix, replica_acks=acks)

    def key(self, idempotency_key: str) -> str:
        """The Redis key of one effect record."""
        return self.keys.effect(idempotency_key)

    def begin(self, key: str, attempt: int, token: str | None = None) -> Claim:
        """Claim ``key`` for ``attempt``; ``token`` makes a repeated call by one run safe."""
        owner = token or uuid.uuid4().hex
        outcome, value = self._write(self._begin, self.key(key), [attempt, self.ttl_s, owner])
        if outcome == ClaimOutcome.COMMITTED:
            return Claim(outcome, result_json=value)
        if outcome == ClaimOutcome.REFUSED:
            refusal = json.loads(value or "{}")
            return Claim(
                outcome, error_type=refusal.get("error_type"), message=refusal.get("message")
            )
        return Claim(outcome)

    def commit(self, key: str, result_json: str) -> None:
        fields = ["state", EffectState.COMMITTED, "result", result_json]
        self._write(self._settle, self.key(key), [self.ttl_s, *fields])

    def refuse(self, key: str, error_type: str, message: str, raw: str) -> None:
        """The handler returned but its result was refused: keep the claim, for good."""
        refusal = json.dumps({"error_type": error_type, "message": message})
        fields = ["state", EffectState.REFUSED, "refusal", refusal, "raw", raw[:MAX_RAW_CHARS]]
        self._write(self._settle, self.key(key), [self.ttl_s, *fields])

    def release(self, key: str, attempt: int | None = None) -> bool:
        """The call failed without an effect (a definite failure): a retry may run.

        Only a ``pending`` claim is released, and with ``attempt`` only that attempt's;
        the highest attempt claimed is kept, so an older attempt stays fenced off.
        """
        done = self._write(self._release, self.key(key), ["" if attempt is None else attempt])
        return bool(done)

    def get(self, key: str) -> dict[str, str]:
        return cast("dict[str, str]", self.r.hgetall(self.key(key)))

    def _write(self, script: Script, key: str, args: list[Any]) -> Any:
        """``script``'s reply on ``key``; with ``replica_acks``, once replicas hold its write."""
        if not self.replica_acks:
            return script(keys=[key], args=args)
        try:
            return self._acknowledged(script, key, args)
        except NoScriptError:  # a promoted master has not seen the script yet
            self.r.script_load(script.script)
            return self._acknowledged(script, key, args)

    def _acknowledged(self, script: Script, key: str, args: list[Any]) -> Any:
        """The script, then ``WAIT`` on the same connection (one pipeline: WAIT counts
        the replicas that hold this connection's writes)."""
        if is_cluster(self.r):
            return self._acknowledged_in_slot(script, key, args)
        pipe = self.r.pipeline(transaction=False)
        pipe.evalsha(script.sha, 1, key, *args)
        pipe.wait(self.replica_acks, REPLICA_ACK_TIMEOUT_MS)
        reply, acked = pipe.execute()
        return self._check_acks(reply, acked)

    def _acknowledged_in_slot(self, script: Script, key: str, args: list[Any]) -> Any:
        """:meth:`_acknowledged` in a cluster: a cluster client would send ``WAIT`` to every
        node, so both go on one connection to the master of ``key``'s slot. A lost master
        or a moved slot makes the cluster client re-read the slot map and counts as
        "Redis away": the gate repeats the call on the master that holds the slot then.

        A master with no replica attached (the one promoted when its master was lost, until
        the old master rejoins as its replica) has nobody to wait for: its records are
        taken alone, with a warning, rather than no effect running until an operator acts
        (docs/operations.md, "Redis Cluster")."""
        cluster = cast("Any", self.r)
        try:
            node = cluster.get_node_from_key(key)
            node_client = cluster.get_redis_connection(node)
            pipe = node_client.pipeline(transaction=False)
            pipe.evalsha(script.sha, 1, key, *args)
            pipe.wait(self.replica_acks, REPLICA_ACK_TIMEOUT_MS)
            reply, acked = pipe.execute()
            if int(acked) >= self.replica_acks:
                self._alone.discard(node.name)
            elif int(node_client.info("replication").get("connected_slaves", 0)) == 0:
                if node.name not in self._alone:  # once per master, not once per record
                    self._alone.add(node.name)
                    log.warning(
                        "master %s has no replica: its effect records are on it only", node.name
                    )
                return reply
        except _SLOT_AWAY as exc:
            with contextlib.suppress(*REDIS_AWAY):
                cluster.nodes_manager.initialize()
            raise redis.ConnectionError(f"the slot of an effect record is away: {exc}") from None
        return self._check_acks(reply, acked)

    def _check_acks(self, reply: Any, acked: Any) -> Any:
        """The script's reply, once ``acked`` replicas are enough."""
        if int(acked) < self.replica_acks:
            raise ReplicaAckMissing(
                f"{acked} of {self.replica_acks} replicas acknowledged an effect record "
                f"within {REPLICA_ACK_TIMEOUT_MS} ms"
            )
        return reply


class RedisGate:
    """Runs effect-store calls, waiting out a Redis outage instead of failing the attempt.

    Backoff is exponential from ``initial_s`` to ``max_s``; the outage and the recovery
    are logged once each, however many tasks wait; ``stop`` ends the wait. A Sentinel
    failover is such an outage (``REDIS_AWAY``: the dead master's lost connections, no
    master elected yet, a demoted master's ``READONLY``): each retry asks the sentinels
    again, so the call goes through once the promoted replica is master.
    """

    def __init__(
        self,
        stop: threading.Event,
        *,
        initial_s: float = 0.05,
        max_s: float = 2.0,
        clock: Clock = SYSTEM_CLOCK,
        handoff: ThreadHandoff | None = None,
    ) -> None:
        self.stop = stop
        #: Where the blocking Redis calls run: a worker's own threads (one loop wake-up per
        #: burst of replies), else the loop's default executor (``asyncio.to_thread``).
        self.handoff = handoff
        #: Paces the backoff and times the outage (a test's manual clock skips the waits).
        self.clock = clock
        self.initial_s = initial_s
        self.max_s = max_s
        self.down_since: float | None = None
        self.outages = 0

    @property
    def is_down(self) -> bool:
        return self.down_since is not None

    async def call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        delay = self.initial_s
        while True:
            try:
                if self.handoff is not None:
                    result = await self.handoff.submit(fn, *args)
                else:
                    result = await asyncio.to_thread(fn, *args)
            except REDIS_AWAY as exc:
                self._went_down(what, exc)
                if self.stop.is_set():
                    raise Stopping(f"stopping while Redis is unreachable ({what})") from None
                await self._sleep(delay)
                delay = min(delay * 2, self.max_s)
                continue
            self._came_back()
            return result

    async def _sleep(self, seconds: float) -> None:
        end = self.clock.monotonic() + seconds
        while not self.stop.is_set() and (left := end - self.clock.monotonic()) > 0:
            await self.clock.sleep_async(min(left, 0.1))

    def _went_down(self, what: str, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = self.clock.monotonic()
            self.outages += 1
            log.warning(
                "Redis unreachable (%s: %s): effect claims paused, retrying with backoff "
                "up to %gs; no attempt is failed for it",
                what,
                type(exc).__name__,
                self.max_s,
            )

    def _came_back(self) -> None:
        if self.down_since is not None:
            log.warning(
                "Redis reachable again after %.1fs: effect claims resumed",
                self.clock.monotonic() - self.down_since,
            )
            self.down_since = None
