"""Supervised background threads: restarted with backoff after any exception, never silent.

A background loop (the projector inside ``keel orchestrator``) that dies would leave the
process looking healthy while its work stops. :class:`Supervisor` runs the loop in a
thread, logs every exception with its traceback, waits (exponential backoff with jitter,
reset after a stretch without failures) and runs it again until told to stop. Its
:meth:`Supervisor.health` is the shape services publish (docs/architecture.md).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Protocol

from orchestrator.config.settings import redact
from orchestrator.records.envelopes import now_ms

log = logging.getLogger("keel.supervisor")

_started: list[Supervisor] = []


def health_of_all() -> dict[str, dict[str, Any]]:
    """The health of every supervised thread started in this process, by name.

    What a process's status (``/healthz``-style JSON) publishes under ``"threads"``.
    """
    return {s.name: s.health() for s in _started}


class Loop(Protocol):
    """What a supervisor runs: ``run`` blocks until ``stop`` is called (or raises)."""

    def run(self) -> None: ...

    def stop(self) -> None: ...


class Supervisor:
    def __init__(
        self,
        name: str,
        loop: Loop,
        *,
        min_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        healthy_after_s: float = 60.0,
    ) -> None:
        self.name = name
        self.loop = loop
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.healthy_after_s = healthy_after_s
        self.restarts = 0
        self.state = "new"
        self.last_error: str | None = None
        self.last_error_at: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name=name, daemon=True)
        if hasattr(loop, "supervisor"):
            loop.supervisor = self  # so the loop can publish the whole health itself

    def start(self) -> Supervisor:
        _started.append(self)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.loop.stop()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """The thread runs and its loop is not waiting out a failure."""
        return self._thread.is_alive() and self.state == "running"

    def health(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "name": self.name,
            "alive": self.alive,
            "state": self.state,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
        }
        own = getattr(self.loop, "health", None)
        if callable(own):
            info.update(own())
        return info

    def _supervise(self) -> None:
        backoff = self.min_backoff_s
        while not self._stop.is_set():
            began = time.monotonic()
            self.state = "running"
            try:
                self.loop.run()
                if self._stop.is_set():
                    break
                raise RuntimeError(f"{self.name} returned without being stopped")
            except Exception as exc:
                if self._stop.is_set():
                    break
                if time.monotonic() - began > self.healthy_after_s:
                    backoff = self.min_backoff_s
                self.restarts += 1
                self.last_error = redact(f"{type(exc).__name__}: {exc}")[:500]
                self.last_error_at = now_ms()
                self.state = "backoff"
                wait = random.uniform(backoff / 2, backoff)
                log.error(
                    "%s failed (restart %d in %.1fs): %s",
                    self.name,
                    self.restarts,
                    wait,
                    self.last_error,
                    exc_info=True,
                )
                publish = getattr(self.loop, "publish_health", None)
                if callable(publish):
                    publish()
                self._stop.wait(wait)
                backoff = min(backoff * 2, self.max_backoff_s)
        self.state = "stopped"
