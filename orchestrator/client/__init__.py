"""The client: validated commands out, the read model and the logs read back
(``client``: ``KeelClient``), dead letters (``dlq``), human-task decisions
(``task_decisions``), exported histories (``history_io``) and migrations (``migrations``).

Used by the CLI, the connector, the engine and applications; may import the I/O adapters,
``orchestrator.runtime``, the application object, codec, settings and the domain.
"""
