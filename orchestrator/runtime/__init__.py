"""What every Keel process runs on: the status file a process writes and ``keel infra
status`` reads (``health``) and the supervised threads it runs its loops in
(``supervisor``).

The processes themselves live beside it (``orchestrator.engine``, ``orchestrator.projector``,
``handlers`` (the worker), ``connectors``, ``orchestrator.sagas``). It may import the I/O
adapters, telemetry, records, codec, settings and the domain; never a process or the client
(docs/architecture.md, "The layers"; ``lint-imports`` checks it).
"""
