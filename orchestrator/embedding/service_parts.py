"""What one process's Keel parts are built with, made once: the composition root.

Every ``keel`` service command (orchestrator/cli/services.py, connector.py), the test kit's
real stack (orchestrator/testing/real_stack.py) and an application that embeds Keel in a
process of its own build their parts through :class:`ServiceParts`: one clock, one codec,
the adapter hooks, the process's metrics and its one activity-attempt runner (its sealing
keys and LLM runtime), all from one ``Settings``, handed to each part as it is made
(docs/architecture.md, "What a service is built with"; docs/embedding.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handlers.attempt_runner import AttemptRunner
from handlers.llm.environment import llm_runtimes
from orchestrator.application.app import AppLoadError, KeelApp, load_object
from orchestrator.config.settings import Settings, load_settings
from orchestrator.io.adapter_hooks import NO_HOOKS, AdapterHooks
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.records.clock import Clock, SystemClock
from orchestrator.telemetry.prometheus import ServiceMetrics
from orchestrator.trust.sealing import SealKeySource

if TYPE_CHECKING:
    from connectors.server.service import Connector
    from handlers.worker import Worker
    from orchestrator.engine.orchestrator import Orchestrator
    from orchestrator.io.handoff.committed_channel import CommittedEvents
    from orchestrator.projector.projector import Projector
    from orchestrator.sagas.manager import SagaManager

__all__ = ["ServiceParts", "adapter_hooks_of", "served_app"]


def served_app(app: KeelApp, clock: Clock, settings: Settings | None = None) -> KeelApp:
    """``app`` with the built-in ``keel.schedule`` and its tick activity (docs/schedules.md):
    every service and every run reader knows it. Its ticks read ``clock`` and start runs
    with a client on ``settings`` (a process that runs no tick passes none). The app is
    changed in place, as a service serves it."""
    from orchestrator.client.schedule_ticks import install_schedules

    if settings is None:
        return install_schedules(app, clock=clock)

    def tick_client() -> object:  # the client loads with the first tick, not the service
        from orchestrator.client.client import KeelClient

        return KeelClient(settings, app, clock)

    return install_schedules(app, tick_client, clock)


def adapter_hooks_of(settings: Settings) -> AdapterHooks:
    """The hooks ``KEEL_ADAPTER_HOOKS`` names (``MODULE:ATTR``: an ``AdapterHooks`` or a
    function of no arguments returning one), else none: applied once to the parts built
    (``orchestrator/io/adapter_hooks.py``)."""
    spec = settings.adapter_hooks
    if not spec:
        return NO_HOOKS
    found = load_object(spec, "KEEL_ADAPTER_HOOKS")
    hooks = found if isinstance(found, AdapterHooks) else found() if callable(found) else found
    if not isinstance(hooks, AdapterHooks):
        raise AppLoadError(
            f"KEEL_ADAPTER_HOOKS '{spec}' is a {type(hooks).__name__}, not AdapterHooks"
        )
    logging.getLogger("keel.hooks").warning("adapter hooks on: %r (%s)", hooks, spec)
    return hooks


@dataclass
class ServiceParts:
    """One process's shared parts, and the Keel processes built on them.

    ``ServiceParts.build(app)`` reads the settings once (``KEEL_*``, then ``[tool.keel]``)
    unless given them; then :meth:`orchestrator`, :meth:`worker`, :meth:`projector`,
    :meth:`saga_manager` and :meth:`connector` each make one part that shares the clock,
    codec, hooks, metrics and attempt runner. A part runs with its blocking ``run()``
    (each on a thread of its own when several share the process) until ``stop()``.
    """

    settings: Settings
    #: The application as served: with ``keel.schedule`` (:func:`served_app`).
    app: KeelApp
    clock: Clock
    codec: Codec
    hooks: AdapterHooks
    metrics: ServiceMetrics
    #: The process's one activity-attempt runner: the worker's tasks and local steps.
    attempts: AttemptRunner

    @classmethod
    def build(
        cls,
        app: KeelApp,
        settings: Settings | None = None,
        *,
        clock: Clock | None = None,
        hooks: AdapterHooks | None = None,
    ) -> ServiceParts:
        """The parts of a process serving ``app`` on ``settings`` (read from the environment
        when none), on ``clock`` (the system's when none) and ``hooks`` (those
        ``KEEL_ADAPTER_HOOKS`` names when none)."""
        settings = settings if settings is not None else load_settings()
        clock = clock if clock is not None else SystemClock()
        hooks = hooks if hooks is not None else adapter_hooks_of(settings)
        served = served_app(app, clock, settings)
        attempts = AttemptRunner(
            served,
            seal_keys=SealKeySource(settings),
            clock=clock,
            llm=llm_runtimes(settings, hooks),
        )
        return cls(settings, served, clock, codec_for(settings), hooks, ServiceMetrics(), attempts)

    def orchestrator(self, **options: Any) -> Orchestrator:
        """The orchestrator (its local steps through the runner); ``options`` go to
        ``Orchestrator`` (``checkpoint_interval_s``, ``committed``, ...)."""
        from orchestrator.engine.orchestrator import Orchestrator

        return Orchestrator(
            self.settings,
            self.app,
            clock=self.clock,
            hooks=self.hooks,
            codec=self.codec,
            attempts=self.attempts,
            **options,
        )

    def worker(self, **options: Any) -> Worker:
        """An activity worker for the app's handlers, counting its tasks in the metrics."""
        from handlers.worker import Worker

        return Worker(
            self.settings,
            self.app,
            clock=self.clock,
            hooks=self.hooks,
            attempts=self.attempts,
            metrics=self.metrics,
            **options,
        )

    def projector(self, committed: CommittedEvents | None = None, **options: Any) -> Projector:
        """A projector of the read model; ``committed``: an orchestrator's of this process
        (``orchestrator().committed``), fed in process besides the topic, and then holding
        quiet rows ``Settings.projector_row_hold_s`` (projector/row_hold.py)."""
        from orchestrator.projector.projector import Projector

        if committed is not None:
            options.setdefault("hold_rows_s", self.settings.projector_row_hold_s)
        return Projector(
            self.settings,
            self.app,
            committed=committed,
            clock=self.clock,
            codec=self.codec,
            metrics=self.metrics,
            **options,
        )

    def saga_manager(self, **options: Any) -> SagaManager:
        """The saga manager of the app's sagas (docs/sagas.md)."""
        from orchestrator.sagas.manager import SagaManager

        return SagaManager(self.settings, self.app, codec=self.codec, **options)

    def connector(self, **options: Any) -> Connector:
        """The connector (webhooks, human tasks, the web UI), its webhook sources' secrets
        read through the settings (``Settings.named_secrets``)."""
        from connectors.server.service import Connector, secret_variables

        secrets = self.settings.named_secrets(secret_variables(self.app))
        return Connector(
            self.settings,
            self.app,
            secrets=secrets,
            clock=self.clock,
            hooks=self.hooks,
            codec=self.codec,
            **options,
        )
