"""``keel bench --recovery N`` and ``--finished N``: an orchestrator SIGKILLed and restarted.

The restart measurements of ``ops/bench.py`` (same output: one JSON object), kept apart
from the latency and throughput runs: ``--recovery`` writes N live runs waiting on a
timer and times the restarted orchestrator's first new decision; ``--finished`` runs N
workflows to their end and reports the RSS before and after a restart. Both add a cold
rebuild from ``keel.events`` alone (docs/performance.md, "Recovery and memory").
"""

from __future__ import annotations

import inspect
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from ops.bench_probes import EventTail
from ops.bench_rig import (
    CHECKPOINT_S,
    STATUS_INTERVAL_S,
    Log,
    _spawn,
    _status,
    fold_deferred_s,
)
from orchestrator.client.client import KeelClient
from orchestrator.config.settings import Settings
from orchestrator.records.envelopes import now_ms

__all__ = ["run_finished", "run_recovery"]


class _RestartRig:
    """A fresh prefix, an event tail, a client and one orchestrator that can be SIGKILLed
    and restarted under the same instance id: what the recovery and memory runs share."""

    def __init__(self, settings: Settings, label: str, log: Log) -> None:
        from ops import scratch
        from ops.bench_app import app

        self.settings = scratch.fresh(settings, log, label)
        self.home = Path(tempfile.mkdtemp(prefix=f"keel-bench-{label}-"))
        self.label = label
        self.client = KeelClient(self.settings, app)
        self.tail = EventTail(self.settings)
        self.tail.start()
        self.orch = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        ckpt = ("--checkpoint-interval", str(CHECKPOINT_S))
        return _spawn(
            "orchestrator", self.settings, self.home, "--no-projector", *ckpt,
            KEEL_INSTANCE_ID=self.label, KEEL_LOG_LEVEL="INFO",
        )  # fmt: skip

    def timeline(self, restarted_at: int) -> dict[str, float]:
        """Seconds from the restart to the new process's milestones, from its log: the
        process up (imports, clients), the partitions assigned, the rebuild done."""
        logs = sorted(self.home.glob("orchestrator-*.log"), key=lambda f: f.stat().st_mtime)
        marks = {"started": "process_up_s", "assigned partitions": "rebuilt_s"}
        out: dict[str, float] = {}
        for line in logs[-1].read_text().splitlines() if logs else []:
            try:
                rec = json.loads(line)
                at = datetime.fromisoformat(rec["ts"].replace("Z", "+00:00")).timestamp()
            except (ValueError, KeyError, TypeError):
                continue
            for needle, key in marks.items():
                if needle in rec.get("msg", "") and key not in out:
                    out[key] = round(at - restarted_at / 1000, 2)
        return out

    def start(self, prefix: str, count: int, seconds: int, batch: int = 5000) -> None:
        """``count`` timer_demo runs of ``seconds``, ids ``<prefix>-<i>``."""
        for lo in range(0, count, batch):
            ids = [f"{prefix}-{i}" for i in range(lo, min(count, lo + batch))]
            self.client.start_many("timer_demo", [(wf, {"seconds": seconds}) for wf in ids])

    def wait_for(self, seen: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not seen():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} within {timeout_s:g} s")
            time.sleep(0.01)

    def restart(self) -> int:
        """SIGKILL the orchestrator and start it again; returns when that was (epoch ms)."""
        self.orch.kill()
        self.orch.wait(30)
        restarted_at = now_ms()
        self.orch = self._spawn()
        return restarted_at

    def rss_mb(self) -> float:
        return float(psutil.Process(self.orch.pid).memory_info().rss / 2**20)

    def close(self, *, drop: bool, log: Log) -> None:
        """Stop the processes; then, when ``drop``, delete the prefix (ops/scratch.py)."""
        from ops import scratch

        if self.orch.poll() is None:
            self.orch.kill()
        self.orch.wait(30)
        self.tail.stop()
        self.client.close()
        if drop:
            scratch.drop(self.settings, log)


def run_recovery(
    settings: Settings, live: int, log: Log, keep_topics: bool = False
) -> dict[str, Any]:
    """N runs waiting on a timer, an orchestrator SIGKILLed, then restarted: how soon it
    decides again, and its RSS."""
    rig = _RestartRig(settings, "rec", log)
    tail = rig.tail
    try:
        log(f"writing {live} live runs (timer_demo, one hour)")
        began = time.monotonic()
        rig.start("live", live, 3600)
        rig.wait_for(lambda: len(tail.started_at) >= live, 1800, f"{live} runs started")
        write_s = time.monotonic() - began
        time.sleep(CHECKPOINT_S + 1)  # a checkpoint covers most runs; a tail follows it
        status = _status(rig.home)
        log("orchestrator SIGKILLed; restarting it")
        restarted_at = rig.restart()
        rig.client.start_many("timer_demo", [("probe", {"seconds": 3600})])
        rig.wait_for(lambda: "probe" in tail.started_at, 600, "a decision after the restart")
        first_decision_s = (tail.started_at["probe"] - restarted_at) / 1000
        time.sleep(STATUS_INTERVAL_S * 3)
        rss_mb = rig.rss_mb()
        after = _status(rig.home)
        timeline = rig.timeline(restarted_at)
        log("cold rebuild: every run folded from keel.events alone")
        cold = _cold_rebuild(rig.settings)
    finally:
        rig.close(drop=not keep_topics, log=log)
    return {
        "live_runs": live,
        "topic_prefix": rig.settings.topic_prefix,
        "write_s": round(write_s, 1),
        "events_before_kill": status.get("events"),
        "first_decision_after_start_s": round(first_decision_s, 2),
        **timeline,
        "rebuild_s": after.get("recovery_s"),
        "rss_mb": round(rss_mb, 1),
        "rss_mb_per_100k_live": round(rss_mb * 100_000 / live, 1),
        "live_workflows_after": after.get("live_workflows"),
        **cold,
    }


def _cold_rebuild(settings: Settings) -> dict[str, float]:
    """Every partition rebuilt in this process from ``keel.events`` alone (no snapshot):
    events per second, the runs' states all folded (``cold_live_events_per_s``) or
    summarized (``cold_finished_events_per_s``)."""
    from ops.bench_app import app
    from orchestrator.engine.orchestrator import Orchestrator

    orch = Orchestrator(settings, app, local_activities=False)
    owned = list(range(settings.partitions))
    began = time.monotonic()
    if "use_snapshots" in inspect.signature(orch.recovery.recover).parameters:
        parts = orch.recovery.recover(owned, use_snapshots=False)
    else:  # a version before the option (a before/after comparison): hide the snapshots
        read, snapshots = orch.ctx.log.read, orch.topics.snapshots

        def events_only(topic: str, starts: Any, stop: Any = None) -> Any:
            return iter(()) if topic == snapshots else read(topic, starts, stop)

        orch.ctx.log.read = events_only  # type: ignore[method-assign]
        began = time.monotonic()
        parts = orch.recover(owned)
    took = time.monotonic() - began
    live = sum(ps.live_count() for ps in parts.values())
    finished = sum(
        len(ps.finished) + len(ps.dirty) + getattr(ps, "deferred_finished", 0)
        for ps in parts.values()
    )
    kind = "live" if live >= finished else "finished"
    events = orch.stats.recovered_events
    deferred = sum(len(getattr(ps, "deferred", ())) for ps in parts.values())
    folds_s = fold_deferred_s(parts)
    return {
        f"cold_{kind}_events": events,
        f"cold_{kind}_rebuild_s": round(took, 2),
        f"cold_{kind}_events_per_s": round(events / took),
        f"cold_{kind}_deferred_runs": deferred,
        f"cold_{kind}_deferred_folds_s": round(folds_s, 2),
    }


def run_finished(
    settings: Settings, finished: int, log: Log, keep_topics: bool = False
) -> dict[str, Any]:
    """N runs that finish (timer_demo, zero seconds): the orchestrator's RSS once they have
    ended, and again after a restart that rebuilds them (finished runs are evicted to
    small identities, so memory must stay flat as runs complete; docs/performance.md)."""
    rig = _RestartRig(settings, "fin", log)
    tail = rig.tail
    try:
        time.sleep(STATUS_INTERVAL_S * 3)
        rss_idle_mb = rig.rss_mb()
        log(f"running {finished} workflows to their end (timer_demo, zero seconds)")
        began = time.monotonic()
        rig.start("fin", finished, 0)
        rig.wait_for(lambda: len(tail.ended_at) >= finished, 1800, f"{finished} runs ended")
        run_s = time.monotonic() - began
        time.sleep(CHECKPOINT_S + STATUS_INTERVAL_S * 3)  # a checkpoint evicts summaries
        rss_mb = rig.rss_mb()
        log("orchestrator SIGKILLed; restarting it")
        rig.restart()
        rig.client.start_many("timer_demo", [("probe", {"seconds": 0})])
        rig.wait_for(lambda: "probe" in tail.ended_at, 600, "a run finished after the restart")
        time.sleep(STATUS_INTERVAL_S * 3)
        rss_restart_mb = rig.rss_mb()
        log("cold rebuild: every run summarized from keel.events alone")
        cold = _cold_rebuild(rig.settings)
    finally:
        rig.close(drop=not keep_topics, log=log)
    return {
        "finished_runs": finished,
        "run_s": round(run_s, 1),
        "rss_idle_mb": round(rss_idle_mb, 1),
        "rss_after_mb": round(rss_mb, 1),
        "rss_after_restart_mb": round(rss_restart_mb, 1),
        "rss_growth_mb_per_10k_finished": round((rss_mb - rss_idle_mb) * 10_000 / finished, 1),
        **cold,
    }
