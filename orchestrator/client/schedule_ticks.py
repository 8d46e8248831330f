"""The tick activity of ``keel.schedule``, run by a worker (docs/schedules.md).

Each tick reads the clock it is given (the worker's), asks the read model whether the
previous run has ended, and starts each due tick's run through :meth:`KeelClient.start` with the id
``<name>:<tick>``: the orchestrator records one ``WorkflowStarted`` per id, so a tick
run again (a crash before its result was recorded, a retry) joins the run it started
and never starts a second one. :func:`install_schedules` gives an application the
built-in definition and this handler (the ``keel`` services call it for every app).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from handlers.sdk.activity_errors import TransientError
from orchestrator.application.app import KeelApp
from orchestrator.domain.model.errors import (
    ConfigError,
    InvalidInputError,
    UnavailableError,
    WorkflowIdConflictError,
)
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.records.clock import SYSTEM_CLOCK, Clock
from orchestrator.schedules.definition import TICK_ACTIVITY, install_definition
from orchestrator.schedules.planning import TickInput, TickOutcome, TickResult, run_tick

__all__ = ["START_CONFIRM_S", "Ticker", "install_schedules"]

#: How long one tick waits for the read model to show a run it started.
START_CONFIRM_S = 20.0


class Ticker:
    """Runs ticks with one client per process (built on first use), one tick at a time."""

    def __init__(
        self,
        app: KeelApp,
        client_factory: Callable[[], Any] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.app = app
        #: The tick's ``now``: which fire times are due, missed or buffered.
        self.clock = clock
        self._factory = client_factory
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The client ticks start runs with, built by the process's composition root."""
        if self._client is None:
            if self._factory is None:
                raise ConfigError(
                    "schedule ticks need a client: install_schedules(app, client_factory=...) "
                    "(the keel services pass one built from their settings)"
                )
            self._client = self._factory()
        return self._client

    def tick(self, inp: TickInput) -> TickResult:
        with self._lock:
            return self._tick(inp, self.clock.now_ms())

    def _tick(self, inp: TickInput, now_ms: int) -> TickResult:
        client = self.client()
        spec = inp.spec

        def ended(workflow_id: str) -> bool:
            status = client.projection.status(workflow_id)
            return status is not None and WorkflowStatus(status).is_terminal

        def start(tick_ms: int, run_id: str) -> tuple[TickOutcome, str | None]:
            try:
                started = client.start(
                    spec.workflow,
                    spec.input,
                    workflow_id=run_id,
                    version=spec.version,
                    confirm_timeout_s=START_CONFIRM_S,
                )
            except WorkflowIdConflictError as exc:
                return TickOutcome.CONFLICT, str(exc)
            except UnavailableError as exc:
                raise TransientError(str(exc)) from None
            except InvalidInputError as exc:  # an unknown workflow, an invalid input
                return TickOutcome.FAILED, str(exc)
            return (TickOutcome.JOINED if started.existed else TickOutcome.STARTED), None

        def exists(workflow_id: str) -> bool:
            return client.projection.status(workflow_id) is not None

        return run_tick(inp, now_ms, ended, start, exists)


def install_schedules(
    app: KeelApp, client_factory: Callable[[], Any] | None = None, clock: Clock = SYSTEM_CLOCK
) -> KeelApp:
    """Make ``app`` know ``keel.schedule`` and run its ticks on ``clock``; returns ``app``."""
    install_definition(app)
    if TICK_ACTIVITY not in app.handlers:
        ticker = Ticker(app, client_factory, clock)
        app.activity(TICK_ACTIVITY, input=TickInput, output=TickResult)(ticker.tick)
    return app
