"""A small health status of a Keel process: a JSON file, refreshed, plus a periodic log line.

``<KEEL_HOME>/status/orchestrator-<instance>.json`` holds what an operator (or
``keel infra status``) needs to tell a healthy orchestrator from a stuck one: the
partitions it owns, how long since its last successful commit, broker and consumer
errors, producer resets and abandoned (stalled) calls, quarantined runs, whether
the background threads it started with are still alive, and the health of each loop a
``Supervisor`` runs in it (``supervised``). A worker writes
``worker-<instance>.json`` (its partitions, last commit age, consumer errors and resets,
the Redis gate) with its own log line. Written atomically (a rename), so a reader never
sees half a file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from orchestrator.config.settings import private_dir
from orchestrator.runtime.supervisor import health_of_all

__all__ = ["STALE_AFTER_S", "StatusFile", "service_health", "status_path"]

log = logging.getLogger("keel.health")


def status_path(home: Path, role: str, instance_id: str) -> Path:
    return Path(home) / "status" / f"{role}-{instance_id}.json"


class StatusFile:
    """Writes ``snapshot()`` every ``interval_s``; logs a summary line every ``log_every_s``."""

    def __init__(
        self,
        path: Path,
        snapshot: Callable[[], dict[str, Any]],
        *,
        interval_s: float = 5.0,
        log_every_s: float = 60.0,
        log_line: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.path = path
        self.snapshot = snapshot
        self.interval_s = interval_s
        self.log_every_s = log_every_s
        #: The ``health:`` line of this role (the orchestrator's when not given).
        self.log_line = log_line
        self._last_write = 0.0
        self._last_log = time.monotonic()
        #: Threads alive when the process started serving: their health is reported.
        self.watched = {
            t.name: t for t in threading.enumerate() if t is not threading.main_thread()
        }

    def threads(self) -> dict[str, bool]:
        """Each watched thread's name, and whether a thread of that name lives: a client
        call's helper that stalled is replaced by a new one of its name (``BoundedCaller``),
        and the stall is reported as ``stalled_calls``, not as a dead thread."""
        alive = {t.name for t in threading.enumerate()}  # only live threads are listed
        return {name: name in alive for name in self.watched}

    def maybe_write(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_write < self.interval_s:
            return
        self._last_write = now
        status = self.snapshot()
        status["threads"] = self.threads()
        # Each supervised loop's own health: the projector (thread or child, with the
        # child's pid and restarts), the saga manager (docs/operations.md).
        status["supervised"] = health_of_all()
        try:
            private_dir(self.path.parent)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(status, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot write the status file %s: %s", self.path, exc)
        if force or now - self._last_log >= self.log_every_s:
            self._last_log = now
            dead = [n for n, alive in status["threads"].items() if not alive]
            if self.log_line is not None:
                log.info("%s dead_threads=%s", self.log_line(status), dead or "none")
                return
            log.info(
                "health: partitions=%s last_commit_age_s=%s resets=%d stalled_calls=%d "
                "broker_errors=%d quarantined=%d dead_threads=%s",
                status.get("assigned_partitions"),
                status.get("last_commit_age_s"),
                status.get("producer_resets", 0),
                status.get("stalled_calls", 0),
                status.get("broker_errors", 0),
                len(status.get("quarantined", [])),
                dead or "none",
            )


#: A status file older than this belongs to a process that stopped or hangs.
STALE_AFTER_S = 15.0


def service_health(home: Path, now: float | None = None) -> list[dict[str, Any]]:
    """What each Keel process last wrote to ``<KEEL_HOME>/status/*.json``, with a verdict.

    A live process has problems when its file is stale (it hangs), a background thread
    died, a supervised loop waits out a failure before its restart (a projector child
    that keeps exiting, say), or it is not running (recovering, resetting); a process
    that is gone (stopped, or killed) is listed as such and is no problem of the running
    stack.
    """
    now = time.time() if now is None else now
    rows = []
    for path in sorted((home / "status").glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        age = now - float(data.get("updated_at", 0))
        pid = data.get("pid")
        gone = data.get("state") == "stopped" or not (
            isinstance(pid, int) and psutil.pid_exists(pid)
        )
        dead = sorted(name for name, alive in data.get("threads", {}).items() if not alive)
        problems = []
        if not gone:
            if age > STALE_AFTER_S:
                problems.append(f"no update for {age:.0f}s")
            if dead:
                problems.append("dead threads: " + ", ".join(dead))
            if data.get("state") not in (None, "running"):
                problems.append(f"state {data.get('state')}")
            restarting = [
                f"{name} ({info.get('restarts', 0)} restarts; {info.get('last_error') or '?'})"
                for name, info in sorted(data.get("supervised", {}).items())
                if isinstance(info, dict) and info.get("state") == "backoff"
            ]
            if restarting:
                problems.append("restarting after a failure: " + ", ".join(restarting))
        rows.append(
            {"file": path.stem, **data, "age_s": round(age, 1), "gone": gone, "problems": problems}
        )
    return rows
