"""``keel bench``: what a user feels, measured on the real broker, as JSON.

It lives in ``ops/`` because it drives an example application (``ops.bench_app``);
``keel bench`` imports it only when run, so no product module imports the examples.

Each run uses a fresh topic prefix, one orchestrator (with its projector child, the
default deployment) and one worker as separate processes, and measures, for
``three_step`` (three remote activities) and ``three_step_local`` (the same steps run
inside the orchestrator), in the same run:

* client-observed latency at light load (one workflow at a time): from the call to
  ``KeelClient.start`` until the result is seen through the read model exactly as
  ``keel workflow start --wait`` sees it (``rm``), and until the terminal event is read
  from ``keel.events`` (``events``); p50 and p99;
* throughput: N workflows started at once, until the last terminal event;
* latency at half of the remote peak: starts paced at half the measured throughput;
* throughput with the projector off (the orchestrator restarted with ``--no-projector``),
  with it in a process of its own (``keel projector`` beside that orchestrator), and as
  a thread of the orchestrator (``--projector-in thread``);
* Kafka's own floor beside them (``ops/kafka_floor.py``): one bare transactional hop
  with Keel's client settings, and the rate a Python consumer reads the events topic at;
  ``ratios`` divides Keel's figures by them;
* per-hop timings from the orchestrator's counters (status file): commit per
  transaction, decide per command, intake lag (command written -> decided), and the
  worker's part of a remote activity (decided -> report written -> decided, minus the
  orchestrator's intake lag);
* cold rebuild of every partition; peak RSS and CPU per workflow.

``--recovery N`` (``python -m ops.bench --recovery N``) measures instead the restart of
an orchestrator SIGKILLed with N live runs waiting on timers: time from the process
start to its first new decision, and its RSS per 100k live runs. ``--scale`` runs 1, 2
and 3 orchestrators and workers and a rolling restart (``ops/bench_scale.py``).

The last line printed is one JSON object: the median of each metric over the runs.
Times on a shared machine are noisy; compare ratios within one run, not absolutes.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ops.bench_probes import EventTail, HopProbe, RssSampler, clock_ms, summarize, wall_ms
from ops.bench_rig import (
    LOCAL,
    REMOTE,
    Log,
    _fresh_status,
    _percentile,
    _spawn,
    burst,
    fold_deferred_s,
    read_model_shows,
)
from orchestrator.client.client import KeelClient
from orchestrator.config.settings import Settings

#: Transactional hops of a remote ``three_step`` run: its start and one per activity.
REMOTE_HOPS = 4


def _hops(before: dict[str, Any], after: dict[str, Any], workflows: int) -> dict[str, float]:
    """Per-hop means between two status snapshots of one orchestrator."""
    t0, t1 = before.get("timings", {}), after.get("timings", {})

    def d(key: str) -> float:
        return float(t1.get(key, 0)) - float(t0.get(key, 0))

    txns = after.get("transactions", 0) - before.get("transactions", 0)
    cmds = after.get("commands", 0) - before.get("commands", 0)
    lag_n = d("intake_lag_n")
    local_n = d("local_activities")
    return {
        "transactions_per_workflow": txns / workflows if workflows else 0.0,
        "commit_ms": d("commit_ms_total") / txns if txns else 0.0,
        "decide_ms_per_command": d("decide_ms_total") / cmds if cmds else 0.0,
        "intake_lag_ms": d("intake_lag_ms_total") / lag_n if lag_n else 0.0,
        "local_activity_ms": d("local_ms_total") / local_n if local_n else 0.0,
    }


class Bench:
    """One run's processes and clients."""

    def __init__(self, base: Settings, log: Log) -> None:
        from ops import scratch

        self.settings = scratch.fresh(base, log)
        self.home = Path(tempfile.mkdtemp(prefix="keel-bench-"))
        self.log = log
        from ops.bench_app import app

        self.client = KeelClient(self.settings, app)
        self.tail = EventTail(self.settings)
        self.tail.start()
        self.orch = self._orchestrator(projector=True)
        self.worker = _spawn("worker", self.settings, self.home)
        self.projector: subprocess.Popen | None = None
        #: Whether a projector runs (in the orchestrator or beside it).
        self.projecting = True
        #: Runs per second until the read model showed every run finished, per phase.
        self.read_model_rates: dict[str, float] = {}
        self.sampler = RssSampler(
            {"orchestrator": self.orch.pid, "worker": self.worker.pid},
            children={"orchestrator": ("projector_child", "--feed-fd")},
        )
        self.sampler.start()

    def _orchestrator(self, *, projector: bool, thread: bool = False) -> subprocess.Popen:
        args = ["--checkpoint-interval", "1e9"]
        if not projector:
            args.append("--no-projector")
        elif thread:
            args += ["--projector-in", "thread"]
        return _spawn("orchestrator", self.settings, self.home, *args, KEEL_INSTANCE_ID="bench")

    def restart_orchestrator(self, *, projector: bool, thread: bool = False) -> None:
        self.orch.send_signal(signal.SIGTERM)
        self.orch.wait(60)
        self.orch = self._orchestrator(projector=projector, thread=thread)
        self.sampler.pids["orchestrator"] = self.orch.pid
        self.projecting = projector or self.projector is not None

    def stop_projector_process(self) -> None:
        if self.projector is not None:
            self.projector.send_signal(signal.SIGTERM)
            self.projector.wait(60)
            self.projector = None

    def start_projector_process(self) -> None:
        """A standalone ``keel projector`` beside an orchestrator started ``--no-projector``."""
        self.projector = _spawn("projector", self.settings, self.home)
        self.sampler.pids["projector"] = self.projector.pid
        self.projecting = True

    def warm(self, name: str, n: int = 20) -> None:
        ids = [f"warm-{name}-{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]
        self.client.start_many(name, [(wf, {"n": 1}) for wf in ids])
        self.tail.wait_for(set(ids), 180)

    def light(
        self, name: str, count: int, rate: float, tag: str = "", probe: HopProbe | None = None
    ) -> dict[str, Any]:
        """One at a time, as ``keel workflow start --wait`` would: rm and events latency;
        with a ``probe``, each run's hops too (``ops/bench_probes.HopProbe``)."""
        rm: list[float] = []
        ev: list[float] = []
        walls: list[tuple[str, float, float]] = []
        before = _fresh_status(self.home)
        trips = len(self.tail.round_trips)
        for i in range(count):
            wf = f"light-{name}-{tag}{i}"
            sent = wall_ms()
            began = clock_ms()
            self.client.start(name, {"n": i % 100}, workflow_id=wf)
            self.client.wait(wf, 60)
            rm.append(clock_ms() - began)
            walls.append((wf, sent, wall_ms()))
            self.tail.wait_for({wf}, 60)
            ev.append(self.tail.seen_at[wf] - began)
            time.sleep(max(0.0, 1 / rate - rm[-1] / 1000))
        hops = _hops(before, _fresh_status(self.home), count)
        rt = [ms for _, ms in self.tail.round_trips[trips:]]
        if rt:  # a remote activity: decided -> task -> worker -> report -> decided
            hops["activity_round_trip_ms"] = statistics.median(rt)
            hops["worker_hop_ms"] = max(0.0, hops["activity_round_trip_ms"] - hops["intake_lag_ms"])
        extra: dict[str, Any] = {}
        if probe is not None:
            time.sleep(0.2)  # the probe's last fetch
            found = [probe.hops(wf, sent, back) for wf, sent, back in walls]
            extra["hops_ms"] = summarize([h for h in found if h is not None])
        return {
            "rm_p50_ms": statistics.median(rm),
            "rm_p99_ms": _percentile(rm, 0.99),
            "events_p50_ms": statistics.median(ev),
            "events_p99_ms": _percentile(ev, 0.99),
            **hops,
            **extra,
        }

    def throughput(self, name: str, count: int, tag: str) -> float:
        """Runs per second until the last terminal event; with a projector running, the
        rate until the read model shows every run finished goes in ``read_model_rates``."""
        ids = [f"load-{tag}-{i}" for i in range(count)]
        began = time.monotonic()
        rate = count / burst(self.client, self.tail, name, ids, 900)
        if self.projecting:
            read_model_shows(self.client.projection, ids, 900)
            self.read_model_rates[tag] = count / (time.monotonic() - began)
        return rate

    def paced(self, name: str, rate: float, seconds: float, tag: str) -> dict[str, float]:
        """Starts paced at ``rate``/s for ``seconds``: events latency from the send."""
        count = max(10, int(rate * seconds))
        sent: dict[str, float] = {}
        began = time.monotonic()
        for i in range(count):
            wf = f"paced-{tag}-{i}"
            due = began + i / rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.client.start_many(name, [(wf, {"n": i % 100})])
            sent[wf] = clock_ms()
        self.tail.wait_for(set(sent), 300)
        lat = [self.tail.seen_at[wf] - t for wf, t in sent.items()]
        return {
            "rate_per_s": rate,
            "events_p50_ms": statistics.median(lat),
            "events_p99_ms": _percentile(lat, 0.99),
        }

    def close(self) -> None:
        self.sampler.stop()
        for proc in (self.orch, self.worker, *([self.projector] if self.projector else [])):
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        self.tail.stop()
        self.client.close()


def one_run(
    base: Settings,
    workflows: int,
    light: int,
    light_rate: float,
    log: Log,
    light_only: bool = False,
    throughput_only: bool = False,
    keep_topics: bool = False,
) -> dict[str, Any]:
    """One run of every phase; ``light_only``: the light-load phases and Kafka's floor
    alone (~40 s: for comparing latency, interleaved, on a noisy machine);
    ``throughput_only``: the two bursts with the projector on and their CPU per run
    (for comparing throughput the same way). The run's prefix is dropped at the end
    unless ``keep_topics`` (ops/scratch.py)."""
    from ops import scratch

    b = Bench(base, log)
    try:
        return _phases(b, workflows, light, light_rate, log, light_only, throughput_only)
    finally:
        if not keep_topics:
            scratch.drop(b.settings, log)


def _phases(
    b: Bench,
    workflows: int,
    light: int,
    light_rate: float,
    log: Log,
    light_only: bool,
    throughput_only: bool,
) -> dict[str, Any]:
    from ops import kafka_floor

    out: dict[str, Any] = {}
    try:
        b.warm(REMOTE)
        b.warm(LOCAL)
        if not throughput_only:
            for name, key in ((REMOTE, "remote"), (LOCAL, "local")):
                log(f"light load, {name}: {light} workflows, one at a time, <= {light_rate:g}/s")
                probe = HopProbe(b.settings) if name == REMOTE else None
                if probe is not None:
                    probe.start()
                try:
                    out[f"light_{key}"] = b.light(name, light, light_rate, probe=probe)
                finally:
                    if probe is not None:
                        probe.stop()
            log(f"Kafka's floor: {light} bare transactional hops, one at a time")
            out["kafka_floor"] = kafka_floor.hop(b.settings, count=light, gap_s=1 / light_rate)
            if light_only:
                return _with_ratios(out)
        log(f"throughput, projector on: {workflows} workflows at once")
        cpu0 = b.sampler.cpu_mark()
        out["throughput_remote"] = b.throughput(REMOTE, workflows, "remote")
        time.sleep(0.25)
        cpu = {r: b.sampler.cpu_s[r] - cpu0[r] for r in cpu0}
        cpu0 = b.sampler.cpu_mark()
        out["throughput_local"] = b.throughput(LOCAL, workflows, "local")
        time.sleep(0.25)
        cpu_local = {r: b.sampler.cpu_s[r] - cpu0[r] for r in cpu0}
        out["cpu_ms_per_workflow"] = {r: 1000 * c / workflows for r, c in cpu.items()}
        out["cpu_ms_per_workflow_local"] = {r: 1000 * c / workflows for r, c in cpu_local.items()}
        if throughput_only:
            return out
        peak = out["throughput_remote"]
        log(f"half of peak: {peak / 2:.0f}/s for 5 s")
        out["half_peak_remote"] = b.paced(REMOTE, peak / 2, 5, "remote")
        out["half_peak_local"] = b.paced(LOCAL, out["throughput_local"] / 2, 5, "local")
        log("throughput, projector off")
        b.restart_orchestrator(projector=False)
        b.warm(REMOTE)
        out["throughput_remote_no_projector"] = b.throughput(REMOTE, workflows, "remote-np")
        out["throughput_local_no_projector"] = b.throughput(LOCAL, workflows, "local-np")
        log("throughput, projector in a process of its own")
        b.start_projector_process()
        b.warm(REMOTE)
        out["throughput_remote_projector_process"] = b.throughput(REMOTE, workflows, "remote-pp")
        out["throughput_local_projector_process"] = b.throughput(LOCAL, workflows, "local-pp")
        log("throughput, projector in a thread of the orchestrator")
        b.stop_projector_process()
        b.restart_orchestrator(projector=True, thread=True)
        b.warm(REMOTE)
        out["throughput_remote_projector_thread"] = b.throughput(REMOTE, workflows, "remote-pt")
        out["throughput_local_projector_thread"] = b.throughput(LOCAL, workflows, "local-pt")
        out["read_model_throughput"] = {k: round(v, 2) for k, v in b.read_model_rates.items()}
        out["peak_rss_mb"] = dict(b.sampler.peak)
    finally:
        b.close()
    log("cold start: rebuilding every partition from keel.events")
    from ops.bench_app import app
    from orchestrator.engine.orchestrator import Orchestrator

    cold = Orchestrator(b.settings, app, local_activities=False)
    t0 = time.monotonic()
    parts = cold.recover(list(range(b.settings.partitions)))
    rebuild_s = time.monotonic() - t0
    out["rebuild_events_per_s"] = cold.stats.recovered_events / rebuild_s
    out["rebuilt_events"] = cold.stats.recovered_events
    out["rebuild_deferred_folds_s"] = round(fold_deferred_s(parts), 2)
    ceiling = kafka_floor.read_ceiling(b.settings, b.settings.topic("events"))
    out["read_ceiling_events_per_s"] = ceiling["records_per_s"]
    return _with_ratios(out)


def _with_ratios(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with what Keel adds over Kafka alone, in this run (docs/performance.md)."""
    floor = out["kafka_floor"]["hop_p50_ms"]
    floor_p99 = out["kafka_floor"]["hop_p99_ms"]
    remote = out["light_remote"]
    ratios = {
        "local_events_p50_over_kafka_hop": round(out["light_local"]["events_p50_ms"] / floor, 2),
        "local_rm_p50_over_kafka_hop": round(out["light_local"]["rm_p50_ms"] / floor, 2),
        # a remote run is REMOTE_HOPS transactional hops: 1.0 would be Kafka alone
        "remote_rm_p50_over_kafka_hops": round(remote["rm_p50_ms"] / (REMOTE_HOPS * floor), 2),
        "remote_rm_p99_over_kafka_hops_p99": round(
            remote["rm_p99_ms"] / (REMOTE_HOPS * floor_p99), 2
        ),
        "remote_rm_p50_over_kafka_hop": round(remote["rm_p50_ms"] / floor, 2),
        "remote_rm_p99_over_kafka_hop_p99": round(remote["rm_p99_ms"] / floor_p99, 2),
    }
    if "rebuild_events_per_s" in out:
        ratios["rebuild_over_read_ceiling"] = round(
            out["rebuild_events_per_s"] / max(1.0, out["read_ceiling_events_per_s"]), 2
        )
        for kind in ("process", "thread"):
            ratios[f"projector_{kind}_over_child_local"] = round(
                out[f"throughput_local_projector_{kind}"] / out["throughput_local"], 2
            )
    out["ratios"] = ratios
    return out


def _median(values: list[Any]) -> Any:
    if isinstance(values[0], list):  # e.g. the slowest runs: each run's, side by side
        return [v for run in values for v in run]
    if isinstance(values[0], dict):
        return {k: _median([v[k] for v in values]) for k in values[0]}
    if isinstance(values[0], int | float):
        return round(statistics.median(values), 2)
    return values[0]


def run_bench(
    settings: Settings,
    workflows: int,
    runs: int,
    light: int,
    light_rate: float,
    log: Log,
    light_only: bool = False,
    throughput_only: bool = False,
    keep_topics: bool = False,
) -> dict[str, Any]:
    results = []
    for i in range(runs):
        log(f"run {i + 1}/{runs}")
        results.append(
            one_run(
                settings, workflows, light, light_rate, log, light_only, throughput_only,
                keep_topics,
            )
        )  # fmt: skip
        log(json.dumps(_median([results[-1]])))
    summary: dict[str, Any] = _median(results)
    summary.update(
        workflows=workflows,
        runs=runs,
        light_load={"workflows": light, "rate_per_s": light_rate},
        partitions=settings.partitions,
    )
    return summary


# -- recovery -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    from orchestrator.config.settings import load_settings

    parser = argparse.ArgumentParser(prog="python -m ops.bench", description=__doc__)
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--light", type=int, default=100)
    parser.add_argument("--light-rate", type=float, default=20.0)
    parser.add_argument("--recovery", type=int, default=0, metavar="N")
    parser.add_argument("--finished", type=int, default=0, metavar="N")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="1, 2, 3 orchestrators and workers (bench_scale.py)",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--light-only", action="store_true", help="the light-load phases and Kafka's floor only"
    )
    only.add_argument(
        "--throughput-only",
        action="store_true",
        help="the two bursts with the projector on, and their CPU per run, only",
    )
    parser.add_argument(
        "--keep-topics",
        action="store_true",
        help="keep each run's topics and Redis keys (dropped by default)",
    )
    args = parser.parse_args(argv)
    settings = load_settings()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    from ops.bench_restart import run_finished, run_recovery

    if args.scale:
        from ops.bench_scale import run_scale

        result = run_scale(settings, log, workflows=args.workflows, keep_topics=args.keep_topics)
    elif args.recovery:
        result = run_recovery(settings, args.recovery, log, args.keep_topics)
    elif args.finished:
        result = run_finished(settings, args.finished, log, args.keep_topics)
    else:
        result = run_bench(
            settings,
            args.workflows,
            args.runs,
            args.light,
            args.light_rate,
            log,
            args.light_only,
            args.throughput_only,
            args.keep_topics,
        )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
