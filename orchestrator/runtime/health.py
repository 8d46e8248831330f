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

from orchestrator.runtime.supervisor import health_of_all

__all__ = ["StatusFile", "status_path"]

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
        return {name: t.is_alive() for name, t in self.watched.items()}

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
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
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
