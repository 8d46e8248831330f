"""``keel bench``: the durable core measured on the real broker, as JSON.

It lives in ``ops/`` because it drives the example application; ``keel bench`` imports it
only when run, so no product module imports the examples.

Each run uses a fresh topic prefix and starts one orchestrator and one worker as
separate processes (no projector: the core is measured, not the read model). It
measures, from the event store itself:

* throughput: N ``three_step`` workflows started at once, until the last completes;
* latency at light load: workflows started one at a time at a low rate, from the
  start command's ``recorded_at`` to the ``WorkflowCompleted`` event's;
* cold-start rebuild: the orchestrator's own recovery path over every event written;
* peak RSS of each service process.

The last line printed is one JSON object: the median of each metric over the runs.
Times on a shared machine are noisy; compare ratios between runs, not absolutes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, TopicPartition

from orchestrator.codec import default_codec
from orchestrator.domain.messages import TERMINAL_EVENTS
from orchestrator.examples import app as example_app
from orchestrator.runtime.client import KeelClient
from orchestrator.runtime.kafka import consume_batch, consumer_config, now_ms
from orchestrator.settings import Settings

WORKFLOW = "three_step"
EVENTS_PER_WORKFLOW = 9


class _RssSampler(threading.Thread):
    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.peak = dict.fromkeys(pids, 0.0)
        self.cpu_s = dict.fromkeys(pids, 0.0)
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            for role, pid in self.pids.items():
                try:
                    proc = psutil.Process(pid)
                    self.peak[role] = max(self.peak[role], proc.memory_info().rss / 2**20)
                    times = proc.cpu_times()
                    self.cpu_s[role] = times.user + times.system
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.1)

    def cpu_mark(self) -> dict[str, float]:
        return dict(self.cpu_s)

    def stop(self) -> None:
        self._stop_evt.set()


class _Completions:
    """Tails keel.events and records, per workflow, when it ended and how many events it had."""

    def __init__(self, settings: Settings) -> None:
        self.codec = default_codec()
        self.consumer = Consumer(
            consumer_config(settings, f"{settings.topic_prefix}.bench-{uuid.uuid4().hex[:6]}")
        )
        topic = settings.topic("events")
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
        self.ended_at: dict[str, int] = {}
        self.events = 0

    def wait_for(self, ids: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ids <= self.ended_at.keys():
            if time.monotonic() > deadline:
                missing = len(ids - self.ended_at.keys())
                raise TimeoutError(f"{missing} workflows did not end within {timeout_s:g}s")
            for msg in consume_batch(self.consumer, 2000, 0.05):
                err, value = msg.error(), msg.value()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(str(err))
                    continue
                if value is None:
                    continue
                env = self.codec.decode(value)
                self.events += 1
                if isinstance(env.payload, TERMINAL_EVENTS):
                    self.ended_at[env.workflow_id] = env.recorded_at

    def close(self) -> None:
        self.consumer.close()


def _spawn(role: str, settings: Settings, log_dir: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        KEEL_BOOTSTRAP_SERVERS=settings.kafka_servers,
        KEEL_REDIS_URL=settings.redis,
        KEEL_TOPIC_PREFIX=settings.topic_prefix,
        KEEL_LOG_LEVEL="WARNING",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", role, *args],
        env=env,
        stdout=(log_dir / f"{role}.log").open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_run(
    base: Settings, workflows: int, light: int, light_rate: float, log: Any
) -> dict[str, float]:
    from ops.topics import create_topics

    settings = base.model_copy(update={"topic_prefix": f"bench-{uuid.uuid4().hex[:8]}"})
    create_topics(settings)
    log_dir = Path(tempfile.mkdtemp(prefix="keel-bench-"))
    orch = _spawn(
        "orchestrator", settings, log_dir, "--no-projector", "--checkpoint-interval", "1e9"
    )
    worker = _spawn("worker", settings, log_dir)
    sampler = _RssSampler({"orchestrator": orch.pid, "worker": worker.pid})
    sampler.start()
    client = KeelClient(settings, example_app)
    done = _Completions(settings)
    try:
        # Warm up: both processes joined their groups and the path is hot.
        warm = [f"warm-{i}" for i in range(20)]
        client.start_many(WORKFLOW, [(wf, {"n": 1}) for wf in warm])
        done.wait_for(set(warm), 120)

        log(f"light load: {light} workflows at {light_rate:g}/s")
        sent_at: dict[str, int] = {}
        for i in range(light):
            wf = f"light-{i}"
            client.start_many(WORKFLOW, [(wf, {"n": i})])
            sent_at[wf] = now_ms()
            time.sleep(1 / light_rate)
        done.wait_for(set(sent_at), 120)
        latencies = [done.ended_at[wf] - sent_at[wf] for wf in sent_at]

        log(f"throughput: {workflows} workflows at once")
        events_before = done.events
        ids = [f"load-{i}" for i in range(workflows)]
        cpu_before = sampler.cpu_mark()
        began = time.monotonic()
        client.start_many(WORKFLOW, [(wf, {"n": i % 100}) for i, wf in enumerate(ids)])
        done.wait_for(set(ids), 600)
        elapsed = time.monotonic() - began
        events = done.events - events_before
        time.sleep(0.25)  # one more sample
        cpu = {r: sampler.cpu_s[r] - cpu_before[r] for r in cpu_before}
    finally:
        sampler.stop()
        for proc in (orch, worker):
            proc.kill()
            proc.wait(30)
        done.close()
        client.close()

    log("cold start: rebuilding every partition from keel.events")
    from orchestrator.runtime.orchestrator import Orchestrator

    cold = Orchestrator(settings, example_app)
    t0 = time.monotonic()
    cold.recover(list(range(settings.partitions)))
    rebuild_s = time.monotonic() - t0
    return {
        "workflows_per_s": workflows / elapsed,
        "events_per_s": events / elapsed,
        "p50_ms": statistics.median(latencies),
        "p99_ms": _percentile(latencies, 0.99),
        "rebuild_events_per_s": cold.stats.recovered_events / rebuild_s,
        "rebuilt_events": cold.stats.recovered_events,
        "cpu_ms_per_workflow_orchestrator": 1000 * cpu["orchestrator"] / workflows,
        "cpu_ms_per_workflow_worker": 1000 * cpu["worker"] / workflows,
        "peak_rss_mb_orchestrator": sampler.peak["orchestrator"],
        "peak_rss_mb_worker": sampler.peak["worker"],
    }


def run_bench(
    settings: Settings, workflows: int, runs: int, light: int, light_rate: float, log: Any
) -> dict[str, Any]:
    results = []
    for i in range(runs):
        log(f"run {i + 1}/{runs}")
        results.append(one_run(settings, workflows, light, light_rate, log))
        log(json.dumps({k: round(v, 1) for k, v in results[-1].items()}))
    summary: dict[str, Any] = {
        key: round(statistics.median(r[key] for r in results), 1) for key in results[0]
    }
    summary["cpu_ms_per_workflow"] = {
        "orchestrator": summary.pop("cpu_ms_per_workflow_orchestrator"),
        "worker": summary.pop("cpu_ms_per_workflow_worker"),
    }
    summary["peak_rss_mb"] = {
        "orchestrator": summary.pop("peak_rss_mb_orchestrator"),
        "worker": summary.pop("peak_rss_mb_worker"),
    }
    summary.update(
        workflow=WORKFLOW,
        workflows=workflows,
        runs=runs,
        light_load={"workflows": light, "rate_per_s": light_rate},
        partitions=settings.partitions,
    )
    return summary
