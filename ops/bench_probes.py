"""What ``keel bench`` watches while a run goes: each process's RSS and CPU,
``keel.events`` tailed as a user's reader would (when each run ended, seen from here), and
a light remote run's hops (:class:`HopProbe`).

Kept apart from ``ops/bench.py``, which drives the phases.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
import uuid
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, TopicPartition

from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import (
    TERMINAL_EVENT_NAMES,
    TERMINAL_EVENTS,
    ActivityCompleted,
    ActivityScheduled,
    ActivityTask,
    CompleteActivity,
    WorkflowStarted,
)
from orchestrator.engine.recovery import TYPE_HEADER
from orchestrator.io.kafka.clients import consume_batch, consumer_config
from orchestrator.payload_schemas.codec import codec_for

__all__ = ["HOPS", "EventTail", "HopProbe", "RssSampler", "clock_ms", "summarize", "wall_ms"]


_HOPS = frozenset(t.__name__ for t in (WorkflowStarted, ActivityScheduled, ActivityCompleted))


def _type_of(msg: Any) -> str | None:
    """The event type a record's header names (``None`` without one)."""
    for key, value in msg.headers() or ():
        if key == TYPE_HEADER and value is not None:
            return bytes(value).decode()
    return None


def clock_ms() -> float:
    """Monotonic milliseconds with sub-ms resolution, for client-observed latencies."""
    return time.perf_counter() * 1000


#: How often a role's children are looked for while it has none known.
CHILD_SCAN_S = 1.0


class RssSampler(threading.Thread):
    """Each role's peak RSS (MB) and CPU seconds, sampled every 100 ms.

    CPU comes from ``/proc`` in clock ticks (10 ms): a figure per run needs a burst long
    enough to span many of them.

    A role's CPU is summed over every process that held it (an orchestrator restarted, a
    projector child started again), so marks taken across a restart stay comparable.
    ``children`` names, per role, the role of its children whose command line holds a
    marker: the orchestrator's projector child (``--feed-fd``).
    """

    def __init__(
        self, pids: dict[str, int], children: dict[str, tuple[str, str]] | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.children = children or {}
        roles = [*pids, *(child for child, _ in self.children.values())]
        self.peak = dict.fromkeys(roles, 0.0)
        self.cpu_s = dict.fromkeys(roles, 0.0)
        self._used: dict[int, float] = {}  # pid -> its CPU seconds at the last sample
        #: Per role, its child found last; children are looked for again only when it
        #: ended, and then at most every ``CHILD_SCAN_S`` (a scan reads every /proc entry).
        self._child: dict[str, psutil.Process] = {}
        self._scanned_at: dict[str, float] = {}
        self._stop_evt = threading.Event()
        self._lock = threading.Lock()

    def _sample(self, role: str, proc: psutil.Process) -> None:
        self.peak[role] = max(self.peak.get(role, 0.0), proc.memory_info().rss / 2**20)
        times = proc.cpu_times()
        used = times.user + times.system
        self.cpu_s[role] = self.cpu_s.get(role, 0.0) + used - self._used.get(proc.pid, 0.0)
        self._used[proc.pid] = used

    def run(self) -> None:
        while not self._stop_evt.is_set():
            self.sample_now()
            time.sleep(0.1)

    def sample_now(self) -> None:
        """Sample every role once (also from another thread: a mark at a burst's edge)."""
        with self._lock:
            for role, pid in list(self.pids.items()):
                try:
                    proc = psutil.Process(pid)
                    self._sample(role, proc)
                    if role in self.children:
                        self._sample_child(role, proc)
                except psutil.Error:
                    pass

    def _sample_child(self, role: str, proc: psutil.Process) -> None:
        child_role, marker = self.children[role]
        child = self._child.get(role)
        if child is not None:
            with contextlib.suppress(psutil.Error):
                if child.is_running() and child.ppid() == proc.pid:
                    self._sample(child_role, child)
                    return
            del self._child[role]
        if time.monotonic() - self._scanned_at.get(role, 0.0) < CHILD_SCAN_S:
            return
        self._scanned_at[role] = time.monotonic()
        for found in proc.children():
            with contextlib.suppress(psutil.Error):  # ended meanwhile
                if marker in found.cmdline():
                    self._child[role] = found
                    self._sample(child_role, found)
                    return

    def cpu_mark(self) -> dict[str, float]:
        with self._lock:
            return dict(self.cpu_s)

    def stop(self) -> None:
        self._stop_evt.set()


class EventTail(threading.Thread):
    """Tails keel.events in real time: when each run ended (as seen here) and hop times."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.codec = codec_for(settings)
        # Keel's own consumer settings, as a user's reader of keel.events has them; a
        # shorter fetch wait here only adds fetch requests to the broker the run measures.
        self.consumer = Consumer(
            consumer_config(settings, f"{settings.topic_prefix}.bench-{uuid.uuid4().hex[:6]}")
        )
        topic = settings.topic("events")
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
        #: workflow -> when this tail read its terminal event (:func:`clock_ms`)
        self.seen_at: dict[str, float] = {}
        self.ended_at: dict[str, int] = {}  # workflow -> the terminal event's recorded_at
        self.outcome: dict[str, str] = {}  # workflow -> its terminal event's type
        self.started_at: dict[str, int] = {}
        self.scheduled: dict[str, int] = {}  # activity id -> ActivityScheduled recorded_at
        self.round_trips: list[tuple[int, int]] = []  # (completed at, ms since scheduled)
        self.events = 0
        #: Whether hop times are taken (light load). Otherwise only terminal events are
        #: decoded, found by their type header: the tail shares the machine with the run
        #: it times, and decoding every event cost it ~0.2 ms of CPU per run.
        self.hops = True
        self.error: str | None = None
        self._lock = threading.Condition()
        self._stop_evt = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_evt.is_set():
                msgs = consume_batch(self.consumer, 2000, 0.05)
                seen = clock_ms()
                for msg in msgs:
                    err, value = msg.error(), msg.value()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(str(err))
                        continue
                    if value is None:
                        continue
                    if self.wanted(_type_of(msg)):
                        self._note(self.codec.decode(value), seen)
                    else:
                        self.events += 1
                if msgs:
                    with self._lock:
                        self._lock.notify_all()
        except Exception as exc:  # reported by wait_for
            self.error = str(exc)
        finally:
            self.consumer.close()

    def wanted(self, kind: str | None) -> bool:
        """Whether a record of type ``kind`` is decoded (no type header: it is)."""
        return kind is None or kind in TERMINAL_EVENT_NAMES or (self.hops and kind in _HOPS)

    def _note(self, env: Any, seen: float) -> None:
        self.events += 1
        p = env.payload
        wf = env.workflow_id
        if isinstance(p, WorkflowStarted):
            self.started_at[wf] = env.recorded_at
        elif isinstance(p, ActivityScheduled):
            self.scheduled[f"{wf}/{p.activity_id}"] = env.recorded_at
        elif isinstance(p, ActivityCompleted):
            at = self.scheduled.pop(f"{wf}/{p.activity_id}", None)
            if at is not None:
                self.round_trips.append((env.recorded_at, env.recorded_at - at))
        elif isinstance(p, TERMINAL_EVENTS):
            self.ended_at[wf] = env.recorded_at
            self.outcome[wf] = type(p).__name__
            self.seen_at[wf] = seen

    def wait_for(self, ids: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not ids <= self.seen_at.keys():
                if self.error:
                    raise RuntimeError(self.error)
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = len(ids - self.seen_at.keys())
                    raise TimeoutError(f"{missing} workflows did not end within {timeout_s:g}s")
                self._lock.wait(min(left, 0.05))

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(10)


# -- a remote run, hop by hop ------------------------------------------------------------

#: The hops of a remote run, in the order a run crosses them.
HOPS = (
    "client_to_decision",
    "orchestrator_txn",
    "worker_fetch_and_run",
    "report_produce",
    "report_intake",
    "final_txn",
    "read_model_wake",
)


#: How many of the slowest runs ``summarize`` shows hop by hop.
TAIL_RUNS = 3


def wall_ms() -> float:
    """Wall-clock milliseconds: the clock the records' times are in."""
    return time.time() * 1000


class HopProbe(threading.Thread):
    """Where a light remote run's time goes, from the client's send to its return.

    ``keel bench`` runs it beside the light remote phase only. It tails, as a
    ``read_committed`` reader like the worker and the orchestrator, the three topics a
    remote run crosses (commands, activity tasks, events) and notes each record of the
    watched runs: its kind, activity, the time it carries (``recorded_at``: the decision
    time for an event, the worker's time at the report for a report) and when it became
    readable here (wall clock, ms). :func:`run_hops` turns one run's notes into ``HOPS``,
    which add up to its client-observed time (docs/performance.md, "Where a remote run's
    time goes"). Nothing in the product pays for it: the records are the ones a run
    writes anyway. Record times are whole milliseconds and "readable" is when this
    process's fetch brought the record, so each hop is good to about a millisecond.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True, name="bench-hops")
        self.codec = codec_for(settings)
        self.consumer = Consumer(
            consumer_config(settings, f"{settings.topic_prefix}.hops-{uuid.uuid4().hex[:6]}")
        )
        # from each partition's end now, asked for at once: an end resolved at the first
        # fetch could come after the first watched run's records
        parts = [
            TopicPartition(settings.topic(topic), p)
            for topic in ("commands", "activity-tasks", "events")
            for p in range(settings.partitions)
        ]
        for tp in parts:
            tp.offset = self.consumer.get_watermark_offsets(tp, settings.admin_timeout_s)[1]
        self.consumer.assign(parts)
        #: workflow -> [(kind, activity id, recorded_at, readable here)]
        self.seen: dict[str, list[tuple[str, str, int, float]]] = {}
        self.prefix = "light-"
        self._stop_evt = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_evt.is_set():
                msgs = consume_batch(self.consumer, 500, 0.05)
                at = wall_ms()
                for msg in msgs:
                    value = msg.value()
                    if msg.error() is not None or value is None:
                        continue
                    env = self.codec.decode(value)
                    if env.workflow_id.startswith(self.prefix):
                        self._note(env, at)
        finally:
            self.consumer.close()

    def _note(self, env: Any, at: float) -> None:
        p = env.payload
        kinds = (
            (WorkflowStarted, "started"),
            (ActivityScheduled, "scheduled"),
            (ActivityTask, "task"),
            (CompleteActivity, "report"),
            (ActivityCompleted, "completed"),
            (TERMINAL_EVENTS, "terminal"),
        )
        for cls, kind in kinds:
            if isinstance(p, cls):
                aid = getattr(p, "activity_id", "")
                self.seen.setdefault(env.workflow_id, []).append((kind, aid, env.recorded_at, at))
                return

    def hops(self, workflow_id: str, sent: float, returned: float) -> dict[str, float] | None:
        """One run's hops (ms), or None when a record of it was not seen."""
        return run_hops(self.seen.get(workflow_id, []), sent, returned)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(10)


def run_hops(
    seen: list[tuple[str, str, int, float]], sent: float, returned: float
) -> dict[str, float] | None:
    """The hops (ms) of one run from its records as :class:`HopProbe` noted them, each
    hop summed over the run's activities so they add up to ``returned - sent``; None
    when a record of the run is missing."""
    by: dict[tuple[str, str], tuple[int, float]] = {(k, a): (t, s) for k, a, t, s in seen}
    per = dict.fromkeys(HOPS, 0.0)
    try:
        per["client_to_decision"] = by[("started", "")][0] - sent
        for kind, aid, scheduled, _ in seen:
            if kind != "scheduled":
                continue
            task_seen = by[("task", aid)][1]
            report_at, report_seen = by[("report", aid)]
            per["orchestrator_txn"] += task_seen - scheduled
            per["worker_fetch_and_run"] += report_at - task_seen
            per["report_produce"] += report_seen - report_at
            per["report_intake"] += by[("completed", aid)][0] - report_seen
        terminal_at, terminal_seen = by[("terminal", "")]
    except KeyError:
        return None
    per["final_txn"] = terminal_seen - terminal_at
    per["read_model_wake"] = returned - terminal_seen
    return per


def summarize(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Median per run of each hop (summed over a run's activities), the runs counted, and
    the slowest runs hop by hop."""
    if not runs:
        return {"runs": 0}
    out: dict[str, Any] = {h: round(statistics.median(r[h] for r in runs), 2) for h in HOPS}
    out["sum_of_medians"] = round(sum(out[h] for h in HOPS), 2)
    out["runs"] = len(runs)
    # where the tail goes: the slowest runs' hops, each run's largest hop named
    slowest = sorted(runs, key=lambda r: sum(r.values()), reverse=True)[:TAIL_RUNS]
    out["slowest"] = [
        {"total_ms": round(sum(r.values()), 1), **{h: round(r[h], 1) for h in HOPS}}
        for r in slowest
    ]
    return out
