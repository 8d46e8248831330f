"""The saga manager, one process (``manager``): sagas across workflows react to committed
events with commands (docs/sagas.md).

An application declares its sagas with ``orchestrator.Saga`` and ``register`` (defined in
``orchestrator.application.saga_declarations``); ``keel sagas`` (alone) or ``keel
orchestrator`` (a supervised thread, when the application declares any) runs
:class:`~orchestrator.sagas.manager.SagaManager`. Compensation of a single run's effects is the
decider's built-in saga (``orchestrator.domain.lifecycle.compensation``), not this.

May import the client, the I/O adapters, the runtime, telemetry, records, the application
object, codec, settings and the domain; never another process (import-linter checks it).
"""
