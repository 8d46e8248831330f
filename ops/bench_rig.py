"""What every ``keel bench`` measurement shares: the bench app, its services as child
processes, the orchestrator's status file, and the nearest-rank percentile.

``ops/bench.py`` (latency and throughput), ``ops/bench_restart.py`` (``--recovery``,
``--finished``) and ``ops/kafka_floor.py`` (Kafka's own floor) import it; it imports none
of them.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.config.settings import Settings
from orchestrator.domain import TERMINAL_STATUSES

REMOTE = "three_step"
LOCAL = "three_step_local"
APP = "ops.bench_app:app"
#: Seconds between the orchestrator's status-file writes during a bench.
STATUS_INTERVAL_S = 0.5
#: Checkpoint interval of the orchestrator in ``--recovery`` (the default is 30 s).
CHECKPOINT_S = 5.0

Log = Callable[[str], None]


def _env(settings: Settings, home: Path, **extra: str) -> dict[str, str]:
    defaults = {
        "KEEL_LOG_LEVEL": "WARNING",
        "KEEL_HOME": str(home),
        "KEEL_STATUS_INTERVAL_S": str(STATUS_INTERVAL_S),
    }
    return settings.child_environment(**(defaults | extra))


def _spawn(role: str, settings: Settings, home: Path, *args: str, **env: str) -> subprocess.Popen:
    return spawn_app(role, APP, settings, home, *args, **env)


def spawn_app(
    role: str, app: str, settings: Settings, home: Path, *args: str, **env: str
) -> subprocess.Popen:
    """``keel <role> --app <app> <args>`` as a child, its output in ``home``."""
    log_path = home / f"{role}-{uuid.uuid4().hex[:4]}.log"
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", role, "--app", app, *args],
        env=_env(settings, home, **env),
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def burst(client: Any, tail: Any, name: str, ids: list[str], timeout_s: float) -> float:
    """Start ``ids`` runs of ``name`` at once; seconds until ``tail`` (an ``EventTail``)
    read the last one's terminal event. Only terminal events are decoded meanwhile."""
    tail.hops = False  # terminal events only: the tail's CPU is the run's too
    began = time.monotonic()
    try:
        client.start_many(name, [(wf, {"n": i % 100}) for i, wf in enumerate(ids)])
        tail.wait_for(set(ids), timeout_s)
    finally:
        tail.hops = True
    return time.monotonic() - began


def _percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile: the smallest value with at least ``q`` of the
    values at or below it (the p99 of 100 values is the 99th, not the largest)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered), math.ceil(q * len(ordered))) - 1)]


def _status(home: Path) -> dict[str, Any]:
    """The orchestrator's newest status file (timings are cumulative counters)."""
    files = sorted((home / "status").glob("orchestrator-*.json"), key=lambda f: f.stat().st_mtime)
    for _ in range(20):
        try:
            return dict(json.loads(files[-1].read_text())) if files else {}
        except (ValueError, OSError):  # caught mid-write
            time.sleep(0.05)
    return {}


def _fresh_status(home: Path) -> dict[str, Any]:
    time.sleep(STATUS_INTERVAL_S * 2.5)
    return _status(home)


#: Rows ``read_model_shows`` reads per pipeline.
READ_MODEL_CHUNK = 200


def read_model_shows(projection: Any, ids: list[str], timeout_s: float) -> dict[str, str]:
    """Wait until the read model (a ``Projection``) shows every run of ``ids`` ended; each
    run's status then.

    Runs end roughly in the order they started, so every 20 ms it reads the pending rows in
    that order, ``READ_MODEL_CHUNK`` per pipeline, and stops at the first chunk with a run
    still going: reading all of thousands of rows each time cost the client (on the same
    cores as the run it times) more CPU than the runs' own wait.
    """
    done = {str(status) for status in TERMINAL_STATUSES}
    pending = list(ids)
    ended: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} runs never finished in the read model")
        for at in range(0, len(pending), READ_MODEL_CHUNK):
            chunk = pending[at : at + READ_MODEL_CHUNK]
            pipe = projection.r.pipeline(transaction=False)
            for wf in chunk:
                pipe.hget(projection.k_wf(wf), "status")
            going = False
            for wf, status in zip(chunk, pipe.execute(), strict=True):
                if status in done:
                    ended[wf] = status
                else:
                    going = True
            if going:
                break
        pending = [wf for wf in pending if wf not in ended]
        if pending:
            time.sleep(0.02)
    return ended


def fold_deferred_s(parts: dict[int, Any]) -> float:
    """Fold every run a rebuild deferred (``tail_records``); how long it took.

    The orchestrator pays these folds after its rebuild, a few ms at a time between
    batches; a bench times them apart so a rebuild's whole cost shows. A version
    without deferral (a before/after comparison) takes no time here.
    """
    began = time.monotonic()
    for ps in parts.values():
        if getattr(ps, "deferred", None):
            ps.fold_deferred(float("inf"))
    return time.monotonic() - began
