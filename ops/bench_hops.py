"""Where a remote run's time goes, hop by hop, from the client's send to its return.

``keel bench`` runs this probe beside the light remote phase only. It tails, as a
``read_committed`` reader like the worker and the orchestrator, the three topics a remote
run crosses (``keel.commands``, ``keel.activity-tasks``, ``keel.events``) and notes, per
run, when each record became readable here (wall clock, ms) beside the times the records
carry (``recorded_at``: the orchestrator's decision time for an event, the worker's time
at the report for a report). The hops of one run then add up to its client-observed time
(docs/performance.md, "Where a remote run's time goes"):

* ``client_to_decision``: the client's send until the orchestrator decided the start;
* ``orchestrator_txn`` (per activity, and the last decision): a decision until its
  transaction's records are readable (append, offsets, commit, the markers' visibility);
* ``worker_fetch_and_run``: a task readable until the worker has its report (fetch,
  decode, the handler);
* ``report_produce``: the report made until it is readable on ``keel.commands``;
* ``report_intake``: the report readable until the orchestrator decided it;
* ``read_model_wake``: the terminal event readable until ``client.wait`` returned.

Nothing in the product pays for it: the records are the ones a run writes anyway.
Record times are whole milliseconds and "readable" is when this process's fetch brought
the record, so each hop is good to about a millisecond; medians over 100 runs.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from orchestrator.codec import codec_for
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    ActivityCompleted,
    ActivityScheduled,
    ActivityTask,
    CompleteActivity,
    WorkflowStarted,
)
from orchestrator.io.kafka.clients import consume_batch, consumer_config
from orchestrator.settings import Settings

__all__ = ["HOPS", "HopProbe", "wall_ms"]

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
    """Notes each record of the watched runs: (kind, activity, its time, readable here)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True, name="bench-hops")
        self.codec = codec_for(settings)
        self.consumer = Consumer(
            consumer_config(settings, f"{settings.topic_prefix}.hops-{uuid.uuid4().hex[:6]}")
        )
        self.consumer.assign(
            [
                TopicPartition(settings.topic(topic), p, OFFSET_END)
                for topic in ("commands", "activity-tasks", "events")
                for p in range(settings.partitions)
            ]
        )
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
