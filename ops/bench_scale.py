"""``keel bench --scale``: what a second and a third orchestrator and worker buy, and what
a rolling restart of all of them costs under load (docs/performance.md, "Scale-out").

For each size N in ``sizes`` (1, 2, 3): a fresh prefix with 12 partitions and three
replicas on the cluster the settings name (three brokers), N orchestrators (each its own
static member, ``--no-projector``) and N workers as processes, then

* throughput: ``workflows`` runs of ``three_step`` (three remote activities) started at
  once, until the last terminal event is read from ``keel.events``; ``bursts`` times, the
  median reported (each burst too), with the share of the machine's cores each role and
  the whole machine used during the median burst;
* client-observed latency: starts paced at ``rate`` per second (the same for every size)
  for ``paced_s`` seconds, from the send to the terminal event read back; p50 and p99.

Then the rolling restart (``rolling`` orchestrators and workers): ``ledger_step`` runs
(a side effect posting to a ledger whose books count calls per key, ``ops/bench_app.py``)
paced at ``rolling_rate`` while each orchestrator and then each worker in turn is stopped
(SIGTERM) and started again under the same identity; it reports the starts that failed
(refused at the client, or a run that did not complete), the duplicate effects (ledger
keys called more than once), the effects missing, the longest stall (the longest time in
which no run ended while runs were in flight) and the runs' own latency: p50, p99 and the
slowest run (a run whose partition moved waits for its new owner).

One JSON object; the prefixes are dropped at the end unless ``keep_topics``.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ops.bench_probes import EventTail, clock_ms
from ops.bench_rig import APP, REMOTE, Log, _env, _percentile, burst
from orchestrator.client.client import KeelClient
from orchestrator.config.settings import Settings

__all__ = ["ScaleRig", "rolling_restart", "run_scale"]

#: Partitions and replicas of a scale run's topics (issue 47: one 3-broker cluster, 12).
SCALE_PARTITIONS = 12
SCALE_REPLICAS = 3
LEDGER = "ledger_step"
#: How long a restarted process may take to start and be assigned its share.
READY_TIMEOUT_S = 90.0
#: The log line of an orchestrator or worker holding partitions (INFO).
ASSIGNED = "assigned partitions"
STARTED = "started on"


@dataclass
class _Proc:
    """One Keel process of the rig: its role, identity and log; restartable."""

    role: str
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    restarts: int = 0


@dataclass
class Paced:
    """Starts sent at a steady rate on a thread: when each was sent, and what failed."""

    sent: dict[str, float] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


class ScaleRig:
    """A fresh 12-partition prefix, ``orchestrators`` and ``workers`` processes, a client
    and a tail of ``keel.events``."""

    def __init__(self, base: Settings, log: Log, orchestrators: int, workers: int) -> None:
        from ops import scratch
        from ops.bench_app import app

        wanted = {"partitions": SCALE_PARTITIONS, "replication_factor": SCALE_REPLICAS}
        self.settings = scratch.fresh(base.model_copy(update=wanted), log, "scale")
        self.home = Path(tempfile.mkdtemp(prefix="keel-bench-scale-"))
        self.log = log
        self.client = KeelClient(self.settings, app)
        self.tail = EventTail(self.settings)
        self.tail.start()
        self.procs = [self._spawn("orchestrator", f"o{i}") for i in range(1, orchestrators + 1)]
        self.procs += [self._spawn("worker", f"w{i}") for i in range(1, workers + 1)]

    def _spawn(self, role: str, name: str, restarts: int = 0) -> _Proc:
        log_path = self.home / f"{name}-{restarts}.log"
        args = ["--no-projector"] if role == "orchestrator" else []
        popen = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", role, "--app", APP, *args],
            env=_env(
                self.settings,
                self.home,
                KEEL_INSTANCE_ID=f"{self.settings.topic_prefix}-{name}",
                KEEL_LOG_LEVEL="INFO",
            ),
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        return _Proc(role, name, popen, log_path, restarts)

    def ready(self, proc: _Proc, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Wait until ``proc`` holds partitions (an orchestrator) or has started (a
        worker: with more workers than partitions' worth of work it may hold none)."""
        needle = ASSIGNED if proc.role == "orchestrator" else STARTED
        began = time.monotonic()
        while needle not in proc.log.read_text(errors="replace"):
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited {proc.popen.returncode}: see {proc.log}")
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"{proc.name} not ready within {timeout_s:g} s")
            time.sleep(0.1)
        return time.monotonic() - began

    def warm(self, n: int = 30) -> None:
        ids = [f"warm-{i}-{time.monotonic_ns()}" for i in range(n)]
        self.client.start_many(REMOTE, [(wf, {"n": 1}) for wf in ids])
        self.tail.wait_for(set(ids), 180)

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds used so far by each role's processes, and by the whole machine
        (``machine``: every process, the brokers and whatever else shares the host)."""
        used = {"orchestrator": 0.0, "worker": 0.0}
        for proc in self.procs:
            try:
                times = psutil.Process(proc.popen.pid).cpu_times()
            except psutil.Error:
                continue
            used[proc.role] += times.user + times.system
        machine = psutil.cpu_times()
        used["machine"] = machine.user + machine.system + machine.nice + machine.softirq
        return used

    def throughput(self, count: int, tag: str) -> tuple[float, dict[str, float]]:
        """Runs per second of a burst, and the share of the machine's cores each role
        used meanwhile (``machine``: everything running)."""
        cpu0 = self.cpu_s()
        took = burst(self.client, self.tail, REMOTE, [f"load-{tag}-{i}" for i in range(count)], 600)
        cores = took * (psutil.cpu_count() or 1)
        shares = {role: round((t - cpu0[role]) / cores, 2) for role, t in self.cpu_s().items()}
        return count / took, shares

    def pace(self, name: str, rate: float, tag: str) -> tuple[Paced, threading.Thread]:
        """Start ``name`` runs at ``rate``/s on a thread until ``Paced.stop`` is set."""
        paced = Paced()

        def run() -> None:
            began = time.monotonic()
            i = 0
            while not paced.stop.is_set():
                wait = began + i / rate - time.monotonic()
                if wait > 0:
                    paced.stop.wait(wait)
                    continue
                wf = f"{tag}-{i}"
                at = clock_ms()
                try:
                    self.client.start_many(name, [(wf, {"n": i % 100})])
                    paced.sent[wf] = at
                except Exception as exc:  # a refused start is what the run counts
                    paced.refused.append(f"{wf}: {type(exc).__name__}: {exc}")
                i += 1

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return paced, thread

    def paced_latency(self, rate: float, seconds: float) -> dict[str, float]:
        paced, thread = self.pace(REMOTE, rate, "paced")
        time.sleep(seconds)
        paced.stop.set()
        thread.join(30)
        self.tail.wait_for(set(paced.sent), 300)
        lat = [self.tail.seen_at[wf] - t for wf, t in paced.sent.items()]
        return {
            "rate_per_s": rate,
            "runs": len(lat),
            "p50_ms": round(statistics.median(lat), 1),
            "p99_ms": round(_percentile(lat, 0.99), 1),
        }

    def restart(self, proc: _Proc) -> _Proc:
        """Stop ``proc`` as a deploy would (SIGTERM, wait) and start it again."""
        proc.popen.send_signal(signal.SIGTERM)
        proc.popen.wait(60)
        fresh = self._spawn(proc.role, proc.name, proc.restarts + 1)
        self.procs[self.procs.index(proc)] = fresh
        return fresh

    def close(self, *, drop: bool) -> None:
        from ops import scratch

        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(10)
        self.tail.stop()
        self.client.close()
        if drop:
            scratch.drop(self.settings, self.log)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def longest_stall_ms(ended: list[float], since: float, until: float) -> float:
    """The longest time in [``since``, ``until``] in which no run ended (ms)."""
    marks = sorted(t for t in ended if since <= t <= until)
    return max((b - a for a, b in zip([since, *marks], [*marks, until], strict=True)), default=0.0)


def rolling_restart(rig: ScaleRig, rate: float, settle_s: float = 2.0) -> dict[str, Any]:
    """Every orchestrator, then every worker, restarted in turn under ``ledger_step`` load."""
    from ops.bench_app import ledger_key

    for proc in rig.procs:
        rig.ready(proc)
    paced, thread = rig.pace(LEDGER, rate, "roll")
    time.sleep(settle_s)
    began = clock_ms()
    ready_s: dict[str, float] = {}
    for proc in list(rig.procs):
        rig.log(f"rolling restart: {proc.name}")
        fresh = rig.restart(proc)
        ready_s[proc.name] = round(rig.ready(fresh), 2)
        time.sleep(settle_s)
    ended_at = clock_ms()
    paced.stop.set()
    thread.join(30)
    not_ended: set[str] = set()
    try:
        rig.tail.wait_for(set(paced.sent), 180)
    except TimeoutError:
        not_ended = set(paced.sent) - rig.tail.seen_at.keys()
    outcomes = {wf: rig.tail.outcome.get(wf) for wf in paced.sent if wf not in not_ended}
    failed = sorted(wf for wf, kind in outcomes.items() if kind != "WorkflowCompleted")
    books = rig.client.projection.r.hgetall(ledger_key(rig.settings.topic_prefix))
    calls = {_text(key): int(n) for key, n in books.items()}
    mine = {wf: f"{wf}/" for wf in outcomes}
    missing = [wf for wf, head in mine.items() if not any(k.startswith(head) for k in calls)]
    seen = [rig.tail.seen_at[wf] for wf in outcomes]
    lat = [rig.tail.seen_at[wf] - paced.sent[wf] for wf in outcomes]
    return {
        "orchestrators": sum(p.role == "orchestrator" for p in rig.procs),
        "workers": sum(p.role == "worker" for p in rig.procs),
        "rate_per_s": rate,
        "runs": len(paced.sent),
        "restarts": len(ready_s),
        "ready_after_restart_s": ready_s,
        "failed_starts": len(paced.refused) + len(not_ended) + len(failed),
        "refused_starts": paced.refused[:5],
        "runs_not_ended": sorted(not_ended)[:5],
        "runs_not_completed": failed[:5],
        "duplicate_effects": sum(n - 1 for n in calls.values() if n > 1),
        "effects_missing": len(missing),
        "longest_stall_s": round(longest_stall_ms(seen, began, ended_at) / 1000, 2),
        "run_p50_ms": round(statistics.median(lat), 1) if lat else None,
        "run_p99_ms": round(_percentile(lat, 0.99), 1) if lat else None,
        "slowest_run_s": round(max(lat) / 1000, 2) if lat else None,
        "restart_window_s": round((ended_at - began) / 1000, 1),
    }


def run_scale(
    settings: Settings,
    log: Log,
    *,
    workflows: int = 2000,
    bursts: int = 3,
    rate: float = 100.0,
    paced_s: float = 6.0,
    sizes: tuple[int, ...] = (1, 2, 3),
    rolling: int = 2,
    rolling_rate: float = 10.0,
    keep_topics: bool = False,
) -> dict[str, Any]:
    """The scale table and the rolling restart, one JSON object (see the module doc)."""
    out: dict[str, Any] = {"partitions": SCALE_PARTITIONS, "replicas": SCALE_REPLICAS}
    rows = []
    for n in sizes:
        log(f"scale: {n} orchestrator(s) and {n} worker(s)")
        rig = ScaleRig(settings, log, n, n)
        try:
            for proc in rig.procs:
                rig.ready(proc)
            rig.warm(100)
            row: dict[str, Any] = {"orchestrators": n, "workers": n}
            bursts_done = [rig.throughput(workflows, f"b{b}") for b in range(bursts)]
            rates = [round(rate, 1) for rate, _ in bursts_done]
            row["throughput_per_s"] = statistics.median(rates)
            row["bursts_per_s"] = rates
            # the core shares of the median burst
            by_rate = sorted(bursts_done, key=lambda burst: burst[0])
            row["cpu_share"] = by_rate[len(by_rate) // 2][1]
            row["paced"] = rig.paced_latency(rate, paced_s)
            rows.append(row)
            log(f"  {row}")
        finally:
            rig.close(drop=not keep_topics)
    out["sizes"] = rows
    if rows:
        base = rows[0]["throughput_per_s"]
        out["throughput_over_one"] = [round(r["throughput_per_s"] / base, 2) for r in rows]
    if rolling:
        log(f"rolling restart: {rolling} orchestrators and {rolling} workers")
        rig = ScaleRig(settings, log, rolling, rolling)
        try:
            out["rolling_restart"] = rolling_restart(rig, rolling_rate)
        finally:
            rig.close(drop=not keep_topics)
    out["workflows"] = workflows
    return out
