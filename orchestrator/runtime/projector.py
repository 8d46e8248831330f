"""The projector: folds ``keel.events`` into the Redis read model.

It runs inside ``keel orchestrator`` (a thread) by default and alone as
``keel projector``. Offsets are committed after Redis has the batch (at least
once); the read model skips events at or below the sequence number it holds,
so a replayed batch changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import redis
from confluent_kafka import Consumer, Message, TopicPartition

from orchestrator.app import KeelApp
from orchestrator.codec import DecodeError, default_codec
from orchestrator.domain.decider import HistoryError
from orchestrator.domain.messages import Envelope
from orchestrator.domain.state import WorkflowState
from orchestrator.runtime.kafka import (
    consumer_config,
    next_offsets,
    poll_records,
    read_partitions,
)
from orchestrator.runtime.projection import Projection
from orchestrator.settings import Settings

log = logging.getLogger("keel.projector")

CACHE_SIZE = 50_000


class Projector:
    def __init__(self, settings: Settings, app: KeelApp) -> None:
        self.settings = settings
        self.decider = app.decider()
        self.codec = default_codec()
        self.projection = Projection(
            redis.Redis.from_url(settings.redis, decode_responses=True), settings.topic_prefix
        )
        self.topic = settings.topic("events")
        self._cache: OrderedDict[str, WorkflowState] = OrderedDict()
        self._stop = threading.Event()
        self.applied = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        consumer = Consumer(
            consumer_config(self.settings, f"{self.settings.topic_prefix}.projector")
        )
        consumer.subscribe([self.topic], on_assign=self._reset, on_revoke=self._reset)
        try:
            while not self._stop.is_set():
                records = poll_records(consumer, 1000, 0.1)
                if not records:
                    continue
                self.apply(records)
                consumer.commit(offsets=next_offsets(records), asynchronous=False)
        finally:
            consumer.close()

    def _reset(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Another projector may have written while we did not own these partitions.
        self._cache.clear()

    def apply(self, records: Iterable[Message]) -> int:
        """Fold a batch of event records into the read model; returns events applied."""
        by_wf: dict[str, list[Envelope[Any]]] = {}
        for msg in records:
            try:
                env = self.codec.decode(msg.value())
            except DecodeError as exc:
                log.error(
                    "undecodable event at %s[%d]@%d: %s",
                    msg.topic(),
                    msg.partition(),
                    msg.offset(),
                    exc,
                )
                continue
            by_wf.setdefault(env.workflow_id, []).append(env)
        missing = [wf for wf in by_wf if wf not in self._cache]
        if missing:
            self._cache.update(self.projection.load_states(missing))
        updates = {}
        applied = 0
        for wf, events in by_wf.items():
            old = self._cache.get(wf)
            state = old
            fresh = []
            for env in events:
                if state is not None and env.seq <= state.seq:
                    continue
                try:
                    state = self.decider.evolve(state, env)
                except HistoryError as exc:
                    log.error("cannot project %s seq %d: %s", wf, env.seq, exc)
                    break
                fresh.append(env)
            if state is None or not fresh:
                continue
            applied += len(fresh)
            updates[wf] = (state, fresh, old.status if old else None)
            self._cache[wf] = state
            self._cache.move_to_end(wf)
        if updates:
            self.projection.write(updates)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        self.applied += applied
        return applied

    def rebuild(self, progress: Any = None) -> tuple[int, float]:
        """Drop the read model and replay every event into it; returns (events, seconds)."""
        began = time.monotonic()
        self.projection.clear()
        self._cache.clear()
        from ops.topics import admin_client

        meta = admin_client(self.settings).list_topics(self.topic, timeout=30)
        partitions = list(meta.topics[self.topic].partitions)
        batch: list[Message] = []
        total = 0
        for msg in read_partitions(self.settings, self.topic, dict.fromkeys(partitions, 0)):
            batch.append(msg)
            if len(batch) >= 2000:
                total += len(batch)
                self.apply(batch)
                batch.clear()
                if progress:
                    progress(total)
        if batch:
            total += len(batch)
            self.apply(batch)
        return total, time.monotonic() - began
