"""The projector, one process (or a child / thread of the orchestrator): events into the
Redis read model (``projector``, ``projector_child``, ``placement``, ``feed_cursor``). The rows
it writes are ``orchestrator.records``'; the committed events the engine hands it arrive
through ``orchestrator.io.handoff``.

May import the I/O adapters, the runtime, telemetry, records, the application object, codec,
settings and the domain; never another process (import-linter checks it).
"""
