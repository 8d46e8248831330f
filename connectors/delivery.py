"""The two stores a webhook delivery passes through: Redis (dedupe) and Kafka (the command).

:class:`AckingProducer` answers only when Kafka acknowledged the record or gave up on it:
its delivery timeout (``message.timeout.ms``) is the time the connector waits, so a record
refused with 503 is no longer queued anywhere and cannot arrive later beside the sender's
retry. (``confluent_kafka.aio.AIOProducer`` is experimental and batches behind a buffer
timeout; one poll thread and a future per record is all this needs.)

:class:`Dedupe` keeps one Redis key per (source, event id) under the ``dd`` keyspace
(``orchestrator/io/redis/keyspace.py``): ``pending`` while one connector delivers it (a
``SET NX`` with a short expiry, so a crashed holder frees it), ``done`` once Kafka
acknowledged it (kept for the source's dedupe TTL). It holds at most
:data:`MAX_REDIS_CONNECTIONS` connections; a request waits for a free one (up to the wait
for Kafka), so a burst of deliveries queues instead of being refused: only Redis itself
failing, or no connection coming free in that wait, is a 503 (docs/connector.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from redis.asyncio import Redis

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.io.kafka.clients import plain_producer
from orchestrator.io.redis.client_factory import (
    REDIS_ERRORS,
    RedisUse,
    async_redis_client,
    away_reason,
)
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.records.clock import SYSTEM_CLOCK, Clock

__all__ = ["MAX_REDIS_CONNECTIONS", "AckingProducer", "Claim", "ClaimState", "Dedupe"]

log = logging.getLogger("keel.connector")

#: Redis connections one connector holds at most; a request waits for a free one.
MAX_REDIS_CONNECTIONS = 64


class AckingProducer:
    """A Kafka producer whose :meth:`send` returns once the broker acknowledged the record."""

    def __init__(self, settings: Settings, ack_timeout_s: float) -> None:
        self.settings = settings
        self.ack_timeout_s = ack_timeout_s
        self._fatal = False
        self._producer = self._new_producer()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="connector-producer", daemon=True)
        self._thread.start()

    def _new_producer(self) -> Producer:
        timeout_ms = int(self.ack_timeout_s * 1000)
        # connected before the first webhook is sent (``plain_producer``: else its first
        # record waits ~500 ms for the producer id)
        return plain_producer(
            self.settings,
            **{
                # the wait for an acknowledgement, after which librdkafka drops the record
                "message.timeout.ms": timeout_ms,
                "request.timeout.ms": min(timeout_ms, 30_000),
                "error_cb": self._on_error,
            },
        )

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            log.error("Kafka producer fatal error, making a new producer: %s", err.str())
            self._fatal = True
        else:
            log.debug("Kafka producer: %s", err.str())

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, str | bytes | None]]
    ) -> None:
        """Produce one record; UnavailableError unless Kafka acknowledged it."""
        if self._fatal:
            self._fatal = False
            old, self._producer = self._producer, self._new_producer()
            old.flush(0)
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[KafkaError | None] = loop.create_future()

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            loop.call_soon_threadsafe(_settle, acked, err)

        try:
            self._producer.produce(
                topic, key=key, value=value, headers=headers, on_delivery=on_delivery
            )
        except BufferError:
            raise UnavailableError("the connector's Kafka queue is full; retry later") from None
        except KafkaException as exc:
            raise UnavailableError(f"Kafka refused the command: {exc}") from None
        try:
            err = await asyncio.wait_for(acked, self.ack_timeout_s + 5)
        except TimeoutError:
            raise UnavailableError(
                f"Kafka did not acknowledge the command within {self.ack_timeout_s:g} s"
            ) from None
        if err is not None:
            raise UnavailableError(f"Kafka did not acknowledge the command: {err.str()}")

    async def reachable(self, timeout_s: float = 3.0) -> str | None:
        """None when the commands topic's metadata came back from a broker; else why not."""
        topic = self.settings.topic("commands")
        loop = asyncio.get_running_loop()
        try:
            meta = await loop.run_in_executor(
                None, lambda: self._producer.list_topics(topic, timeout=timeout_s)
            )
        except KafkaException as exc:
            return f"Kafka is unreachable: {exc.args[0].str() if exc.args else exc}"
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            return f"topic {topic} is not available: {found.error.str() if found else 'missing'}"
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._producer.flush(5)


def _settle(fut: asyncio.Future[KafkaError | None], err: KafkaError | None) -> None:
    if not fut.done():
        fut.set_result(err)


class ClaimState(StrEnum):
    CLAIMED = "claimed"  # this request delivers the event
    DONE = "done"  # delivered before: a duplicate
    IN_FLIGHT = "in_flight"  # another request still delivers it


@dataclass(frozen=True)
class Claim:
    state: ClaimState
    token: str = ""
    record: dict[str, Any] | None = None


#: A release that failed: Redis's error, or the slot wait that gave up.
_RELEASE_FAILED: tuple[type[Exception], ...] = (*REDIS_ERRORS, UnavailableError)

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class Dedupe:
    """Per-event markers in Redis; every Redis error (``REDIS_ERRORS``) becomes
    UnavailableError."""

    def __init__(
        self,
        redis: Redis,
        keyspace: Keyspace,
        lock_s: float,
        wait_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.redis = redis
        #: When a marker says its event was done.
        self.clock = clock
        self.keyspace = keyspace
        self.lock_ms = int(lock_s * 1000)
        self.wait_s = wait_s
        self._release = redis.register_script(_RELEASE)
        # every command takes a slot first, so the pool below never runs out
        self._slots = asyncio.Semaphore(MAX_REDIS_CONNECTIONS)

    @classmethod
    def connect(
        cls,
        url: str,
        keyspace: Keyspace,
        lock_s: float,
        wait_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Dedupe:
        """Markers in the Redis at ``url``, over a pool of its own with bounded waits."""
        return cls(
            async_redis_client(url, RedisUse.WEBHOOK_DEDUPE, max_connections=MAX_REDIS_CONNECTIONS),
            keyspace,
            lock_s,
            wait_s,
            clock,
        )

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the pool's connections, waited for up to ``wait_s`` (a burst queues)."""
        try:
            async with asyncio.timeout(self.wait_s):
                await self._slots.acquire()
        except TimeoutError:
            raise UnavailableError(
                f"the connector is busy: none of its {MAX_REDIS_CONNECTIONS} Redis connections "
                f"came free within {self.wait_s:g} s"
            ) from None
        try:
            yield
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        await self.redis.aclose()

    async def claim(self, source: str, event_id: str) -> Claim:
        """Claim the event, or say it was delivered or is being delivered (after waiting)."""
        key = self.keyspace.dedupe(source, event_id)
        token = uuid.uuid4().hex
        pending = json.dumps({"state": "pending", "token": token})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        try:
            while True:
                async with self._slot():
                    if await self.redis.set(key, pending, nx=True, px=self.lock_ms):
                        return Claim(ClaimState.CLAIMED, token)
                async with self._slot():
                    raw = await self.redis.get(key)
                if raw is None:
                    continue  # it expired or was released between the two calls
                record = json.loads(raw)
                if record.get("state") == "done":
                    return Claim(ClaimState.DONE, record=record)
                if loop.time() >= deadline:
                    return Claim(ClaimState.IN_FLIGHT)
                await asyncio.sleep(0.05)
        except REDIS_ERRORS as exc:
            raise _redis_down(exc) from None

    async def release(self, source: str, event_id: str, token: str) -> None:
        """Free our claim after a failed delivery, so the sender's retry goes through."""
        pending = json.dumps({"state": "pending", "token": token})
        try:
            async with self._slot():
                await self._release(keys=[self.keyspace.dedupe(source, event_id)], args=[pending])
        except _RELEASE_FAILED as exc:  # the claim expires by itself
            log.warning("could not release the claim on %s/%s: %s", source, event_id, exc)

    async def done(
        self, source: str, event_id: str, ttl_s: int, workflow_id: str, message_id: str
    ) -> None:
        record = {
            "state": "done",
            "workflow_id": workflow_id,
            "message_id": message_id,
            "at": self.clock.now_ms(),
        }
        key = self.keyspace.dedupe(source, event_id)
        try:
            async with self._slot():
                await self.redis.set(key, json.dumps(record), ex=ttl_s)
        except REDIS_ERRORS as exc:
            raise _redis_down(exc) from None

    async def reachable(self) -> str | None:
        try:
            async with self._slot():
                await self.redis.ping()
        except UnavailableError as exc:
            return str(exc)
        except REDIS_ERRORS as exc:
            return f"Redis is unreachable: {type(exc).__name__}: {away_reason(exc)}"
        return None


def _redis_down(exc: BaseException) -> UnavailableError:
    return UnavailableError(f"Redis is unavailable: {type(exc).__name__}: {away_reason(exc)}")
