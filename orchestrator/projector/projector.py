"""The projector: folds ``keel.events`` into the Redis read model and the task inbox.

It runs inside ``keel orchestrator`` (a supervised thread) by default and alone as
``keel projector``. Offsets are committed after Redis has the batch (at least once);
the read model skips events at or below the sequence number it holds, so a replayed
batch changes nothing. An event that cannot be decoded or folded is logged and skipped
for its workflow (whose row then says so), never fatal. A Redis outage makes ``run``
raise (the batch is rewound first); the supervisor restarts it with backoff and it
resumes from the committed offsets.

It reads through an :class:`~orchestrator.io.ports.EventFeed` and writes through a
:class:`~orchestrator.io.ports.ReadModelStore`: Kafka and Redis in every process,
the in-memory adapter in unit tests (``tests/unit/projector/test_projector_loop.py``). How a batch
of events becomes rows, and the guarded write, are its base's (``row_folding.py``).

While ``keel projections rebuild`` runs, live projectors hold their batch and wait; after
it they drop their cache (the rebuild changed the epoch) and go on from Redis.

Inside ``keel orchestrator`` the projector also listens to the orchestrator's committed
events (``committed.py``; through a pipe in a child process, ``committed_pipe.py``): it
folds them as soon as their transaction commits, for the partitions its own group member
holds, when they follow on from what the read model has for their workflow. While the
hand-off follows on from what it has folded, the consumer does not fetch those partitions
at all (``feed_cursor.py``); anything else (a gap, a dropped hand-off, another process's
partitions) is folded from the topic as before (docs/performance.md, "Where the
projector runs").
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from orchestrator.application.app import KeelApp, decider_of
from orchestrator.config.settings import Settings
from orchestrator.domain.model.state import WorkflowState
from orchestrator.io.handoff.committed_channel import CommittedEvent, CommittedEvents, channel
from orchestrator.io.kafka.clients import ClientMessage, read_partitions
from orchestrator.io.ports import ConsumerReset, EventFeed, ReadModelStore, Record, Stopping
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from orchestrator.io.redis.human_task_inbox import TaskKeys
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.io.redis.read_model import Projection
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.projector.feed_cursor import FeedCursor, Handed
from orchestrator.projector.row_folding import RowFolding
from orchestrator.projector.row_hold import RowHold, hold_quiet
from orchestrator.records.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:  # given by the composition root
    from orchestrator.telemetry.prometheus import ServiceMetrics

log = logging.getLogger("keel.projector")

#: How long the loop waits for committed events in-process before it polls the topic;
#: shorter for a while after the topic brought events that were not folded in-process
#: (another process's partitions), so those are not held up.
IN_PROCESS_WAIT_S = 0.02
TOPIC_ACTIVE_WAIT_S = 0.002
TOPIC_ACTIVE_FOR_S = 1.0
#: How long topic records may wait for their hand-off still on its way before they are
#: folded from the topic.
HANDOFF_HOLD_S = 0.25
#: How often a running projector publishes its health to Redis, and how long it lasts.
HEALTH_EVERY_S = 5.0
HEALTH_TTL_S = 30


class RedisReadModelStore(Projection):
    """The Redis adapter of :class:`~orchestrator.io.ports.ReadModelStore`."""

    def publish_health(self, key: str, info_json: str, ttl_s: int) -> None:
        self.r.set(key, info_json, ex=ttl_s)


class Projector(RowFolding):
    def __init__(
        self,
        settings: Settings,
        app: KeelApp,
        *,
        adapters: tuple[EventFeed, ReadModelStore] | None = None,
        committed: CommittedEvents | None = None,
        clock: Clock = SYSTEM_CLOCK,
        codec: Codec | None = None,
        metrics: ServiceMetrics | None = None,
        hold_rows_s: float = 0.0,
    ) -> None:
        """``metrics``: where the process counts what this projector writes (its composition
        root's; none: nothing counted, as in a rebuild). ``hold_rows_s``: how long a run's
        handed events that change no status may wait for its next write (``row_hold.py``;
        0: each is written as it comes)."""
        self.settings = settings
        #: When rows were applied and health published (the hand-off's waits stay real:
        #: they wait on another thread, not on time).
        self.clock = clock
        self.decider = decider_of(app)
        self.codec = codec or codec_for(settings)
        self.keyspace = Keyspace.for_url(settings.topic_prefix, settings.redis)
        #: The feed given (unit tests); else each run opens a Kafka one of its own.
        self._given_feed: EventFeed | None = None
        self.projection: ReadModelStore
        if adapters is None:
            self.projection = RedisReadModelStore(
                redis_client(settings.redis, RedisUse.READ_MODEL),
                settings.topic_prefix,
                settings.redis,
                app.definitions,
                metrics,
            )
        else:
            self._given_feed, self.projection = adapters
        self.feed: EventFeed | None = self._given_feed
        self._subscribed = False
        self.task_keys = TaskKeys(self.keyspace)
        self.topic = settings.topic("events")
        if committed is None and adapters is None:  # an orchestrator of this process may publish
            committed = channel(self.topic)
        #: The orchestrator's committed events, in-process (None: the topic only).
        self.committed = committed
        self._listening = False
        #: Where the projector stands per partition; set once it has a feed.
        self._cursor: FeedCursor | None = None
        self.applied_in_process = 0
        #: Runs whose new state came with the hand-off, so were not folded again.
        self.folds_taken = 0
        #: Commit (the orchestrator's hand-off) to read model written, summed over the
        #: in-process batches that wrote something, and their count (docs/performance.md
        #: at 6f66b40).
        self.in_process_lag_ms_total = 0.0
        #: The part of it before the projector took the events (its thread's wake-up).
        self.in_process_wake_ms_total = 0.0
        self.in_process_batches = 0
        self._topic_fresh_at = 0.0
        #: Runs' handed events held back for their next write (``row_hold.py``).
        self._hold = RowHold(hold_rows_s)
        self.instance = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self._cache: OrderedDict[str, WorkflowState] = OrderedDict()
        self._epoch: str | None = None
        self._stop = threading.Event()
        self.applied = 0
        self.skipped = 0
        self.last_applied_at: int | None = None
        self.last_offsets: dict[str, int] = {}
        self.last_skip: str | None = None
        self.waiting_for_rebuild = False
        self._health_at = float("-inf")  # publish on the first pass, whatever the clock
        #: Set by a :class:`~orchestrator.runtime.supervisor.Supervisor` running this loop.
        self.supervisor: Any = None

    def stop(self) -> None:
        self._stop.set()

    def health(self) -> dict[str, Any]:
        """Progress for the status of the process (merged into the supervisor's health)."""
        return {
            "instance": self.instance,
            "applied": self.applied,
            "skipped": self.skipped,
            "last_skip": self.last_skip,
            "last_applied_at": self.last_applied_at,
            "last_offsets": dict(self.last_offsets),
            "waiting_for_rebuild": self.waiting_for_rebuild,
            "applied_in_process": self.applied_in_process,
            "in_process_batches": self.in_process_batches,
            "in_process_lag_ms_total": round(self.in_process_lag_ms_total, 3),
            "in_process_wake_ms_total": round(self.in_process_wake_ms_total, 3),
            "in_process_dropped": self.committed.dropped if self.committed is not None else 0,
            "rows_held": len(self._hold.rows),
            "row_holds": self._hold.holds,
            **(self._cursor.health() if self._cursor is not None else {}),
        }

    @property
    def health_key(self) -> str:
        return f"{self.keyspace.read_model}health:projector:{self.instance}"

    def publish_health(self) -> None:
        """Best effort: the health as JSON in Redis for ``keel projections status``."""
        own = self.supervisor.health() if self.supervisor else {**self.health(), "alive": True}
        info = {**own, "updated_at": self.clock.now_ms()}
        try:
            self.projection.publish_health(self.health_key, json.dumps(info), HEALTH_TTL_S)
        except Exception as exc:  # Redis down: the log and the status JSON still say so
            log.debug("cannot publish projector health: %s", exc)

    # ------------------------------------------------------------------ the loop
    def _kafka_feed(self) -> EventFeed:
        from orchestrator.io.kafka.adapter import KafkaGroupIntake

        return KafkaGroupIntake(
            self.settings,
            self.topic,
            f"{self.settings.topic_prefix}.projector",
            stopping=self._stop.is_set,
        )

    def subscribe(self) -> None:
        """Join the events group once; the feed outlives restarts of ``run``."""
        if self._subscribed:
            return
        if self.feed is None:
            self.feed = self._kafka_feed()
        self._cursor = FeedCursor(self.feed)
        self.feed.subscribe(self._reset, self._reset)
        self._subscribed = True
        if self.committed is not None and not self._listening:
            self.committed.listen()
            self._listening = True

    def run(self) -> None:
        """Project until stopped. Raises what it cannot wait out (a supervisor restarts it).

        The feed is kept across restarts: a failed batch was rewound, so the next run
        reads it again; it is closed when the projector stops.
        """
        self._cache.clear()
        self._hold.clear()  # not written: the cursor's restart moves back before them
        # A run after a failure says so at once (its restarts, its last error): otherwise
        # ``keel projections status`` would show the health published before the outage,
        # alive and with no restart, for up to HEALTH_EVERY_S after Redis is back.
        self._health_at = float("-inf")
        self.subscribe()
        assert self._cursor is not None
        self._cursor.restart()  # a batch taken in-process by a failed run is read again
        try:
            while not self._stop.is_set():
                try:
                    self.step()
                except Stopping:  # asked to stop while a batch waited: it is not committed
                    break
        finally:
            if self._stop.is_set():
                try:
                    self._write_held(all_rows=True)
                except Exception as exc:  # best effort: the offsets never passed them
                    log.info("held rows not written on stop (the topic has them): %s", exc)
                if self._listening and self.committed is not None:
                    self.committed.unlisten()
                    self._listening = False
                if self._given_feed is None and self.feed is not None:
                    self.feed.close()

    def step(self) -> int:
        """One poll; its batch folded, written, then its offsets committed. Events applied.

        A batch that cannot be written (Redis away) is rewound and the error raised: no
        offset is committed and the cache keeps only what Redis has.
        """
        feed, cursor = self.feed, self._cursor
        assert feed is not None and cursor is not None and self._subscribed, "subscribe first"
        if self.clock.monotonic() - self._health_at > HEALTH_EVERY_S:
            self._health_at = self.clock.monotonic()
            self.publish_health()
        applied = 0
        timeout_s = 0.1
        committed = self.committed
        in_process = self._listening and committed is not None and committed.publishing
        if self._hold.rows and not in_process:  # no hand-off now: nothing to merge them with
            applied += self._write_held(all_rows=True)
        if in_process:
            recent = time.monotonic() - self._topic_fresh_at < TOPIC_ACTIVE_FOR_S
            wait_s = self._hold.wait_s(TOPIC_ACTIVE_WAIT_S if recent else IN_PROCESS_WAIT_S)
            applied += self._take_committed(wait_s)
            timeout_s = 0.0
        try:
            records = feed.poll(1000, timeout_s)
        except ConsumerReset as exc:
            log.warning("the events consumer is unusable (%s); joining the group again", exc)
            self._cache.clear()
            self._hold.clear()  # the new consumer starts from offsets committed before
            cursor.clear()
            feed.recreate()
            return applied
        if not records:
            feed.commit(cursor.tick())
            return applied
        fresh = cursor.unread(records)
        try:
            if in_process and fresh and committed is not None:
                # Transactions that committed while the last hand-off was folded are on
                # the topic now too: take them in-process first (with their decided
                # states), so the topic's copies are skipped undecoded instead of decoded
                # and folded; wait a little for those still on their way (a child decoding
                # the pipe).
                held_until = time.monotonic() + HANDOFF_HOLD_S
                applied += self._take_committed(0.0)
                fresh = cursor.unread(records)
                while fresh and committed.expecting() and time.monotonic() < held_until:
                    applied += self._take_committed(TOPIC_ACTIVE_WAIT_S)
                    fresh = cursor.unread(records)
            if fresh:
                self._topic_fresh_at = time.monotonic()
                applied += self._write_held(all_rows=True)  # the topic folds after them
            applied += self.apply(fresh) if fresh else 0
        except BaseException:
            self._rewind(feed, records)
            raise
        offsets = cursor.read(records)
        cursor.recheck()
        feed.commit(offsets)
        self.last_applied_at = self.clock.now_ms()
        for p, o in offsets.items():
            self.last_offsets[f"{self.topic}[{p}]"] = o - 1
        return applied

    def _take_committed(self, wait_s: float) -> int:
        """Fold what the orchestrator of this process committed (waiting up to ``wait_s``
        for some); returns events applied."""
        committed = self.committed
        assert committed is not None
        events = committed.take(wait_s)
        taken_at = time.monotonic()
        applied = self.apply_committed(events, flush=self._hold.due())
        if applied:
            self.in_process_batches += 1
            self.in_process_wake_ms_total += 1000 * (taken_at - committed.taken_since)
            self.in_process_lag_ms_total += 1000 * (time.monotonic() - committed.taken_since)
        return applied

    @staticmethod
    def _rewind(feed: EventFeed, records: list[Record]) -> None:
        first: dict[int, int] = {}
        for rec in records:
            first.setdefault(rec.partition, rec.offset)
        for p, o in first.items():
            try:
                feed.rewind(p, o)
            except Exception as exc:  # no longer assigned: its new owner reads it
                log.info("not rewinding %s[%d]: %s", records[0].topic, p, exc)

    def _reset(self, partitions: list[int]) -> None:
        # Another projector may have written while we did not own these partitions.
        self._cache.clear()
        self._hold.clear()
        if self._cursor is not None:
            self._cursor.drop_held()  # the topic brings them again
            self._cursor.forget(partitions)

    def _write_held(self, all_rows: bool = False) -> int:
        """Write held rows: those due, or all of them; returns events applied."""
        rows = list(self._hold.rows) if all_rows else self._hold.due()
        return self.apply_committed([], flush=rows) if rows else 0

    # ------------------------------------------------------------------ in-process
    def apply_committed(self, events: list[CommittedEvent], flush: Iterable[str] = ()) -> int:
        """Fold events the orchestrator of this process just committed; returns events applied.

        Only the partitions this projector's group member holds (no other projector
        writes them), and per workflow only events that follow on from the read model's
        sequence number: a gap (the topic is behind, a hand-off was dropped) is left to
        the topic. The cursor then knows which partitions the topic need not bring.

        With ``hold_rows_s``, a run whose events change nothing a client waits on is held
        (``row_hold.py``) and written with its next events, or once held that long, or
        when named in ``flush``.
        """
        owned = getattr(self.feed, "assignment", None)
        cursor = self._cursor
        if not owned or cursor is None:
            return 0
        mine = [ev for ev in events if ev.partition in owned]
        by_wf: dict[str, list[CommittedEvent]] = {}
        for ev in mine:
            by_wf.setdefault(ev.envelope.workflow_id, []).append(ev)
        earlier = self._hold.take([*by_wf, *flush])  # written now, unless held again
        if not by_wf and not earlier:
            return 0
        envs = {wf: [ev.envelope for ev in evs] for wf, evs in by_wf.items()}
        for wf, row in earlier.items():
            envs[wf] = row.envelopes + envs.get(wf, [])
        self._load_missing(envs)
        for wf in list(envs):
            state = self._cache.get(wf)
            expected = (state.seq if state is not None else 0) + 1
            new = [env for env in envs[wf] if env.seq >= expected]
            if new and any(env.seq != expected + i for i, env in enumerate(new)):
                del envs[wf]  # not next in line: the topic brings what is missing
        decided = {ev.envelope.workflow_id: ev.state for ev in mine if ev.state is not None}
        held = hold_quiet(self._hold, self.decider, self._cache, by_wf, earlier, envs, decided)
        applied, problems = self._apply_envelopes(envs, guarded=True, decided=decided)
        handed: list[Handed] = []
        for ev in mine:
            if ev.offset >= 0:
                wf = ev.envelope.workflow_id
                done = wf in held or (wf in envs and wf not in problems)
                handed.append((ev.partition, ev.offset, ev.follows, done))
        cursor.hold(off for wf, row in held.items() for off in row.offsets)
        cursor.handed(handed)
        lost = [wf for wf in earlier if wf not in held and (wf not in envs or wf in problems)]
        cursor.release(
            off for wf, row in earlier.items() if wf not in held and wf not in lost
            for off in row.offsets
        )  # fmt: skip
        if lost:  # held events not written: the topic must bring them again
            self._hold.clear()
            cursor.drop_held()
        self.applied_in_process += applied
        if applied:
            self.last_applied_at = self.clock.now_ms()
        return applied

    # ------------------------------------------------------------------ rebuild
    def rebuild(self, progress: Callable[[int], Any] | None = None) -> tuple[int, float]:
        """Drop the read model and replay every event into it; returns (events, seconds).

        Safe under traffic: it holds the rebuild lock, so live projectors pause (holding
        their uncommitted batch) and, once it ends, reload their state from Redis.
        """
        store = self.projection
        if not isinstance(store, Projection):
            raise TypeError("a rebuild needs the Redis read model")
        began = time.monotonic()
        token = store.begin_rebuild()
        try:
            store.clear()
            self._cache.clear()
            from orchestrator.io.kafka.topics import admin_client

            meta = admin_client(self.settings).list_topics(self.topic, timeout=30)
            partitions = list(meta.topics[self.topic].partitions)
            batch: list[ClientMessage] = []
            total = 0
            for msg in read_partitions(self.settings, self.topic, dict.fromkeys(partitions, 0)):
                batch.append(msg)
                if len(batch) >= 2000:
                    total += len(batch)
                    self.apply(batch, guarded=False)
                    store.refresh_rebuild(token)
                    batch.clear()
                    if progress:
                        progress(total)
            if batch:
                total += len(batch)
                self.apply(batch, guarded=False)
        except BaseException:
            try:
                store.end_rebuild(token)
            except Exception:
                log.warning("could not release the rebuild lock; it expires on its own")
            raise
        store.end_rebuild(token)
        return total, time.monotonic() - began
