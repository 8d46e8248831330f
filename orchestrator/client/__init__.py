"""The client: validated commands out, the read model and the logs read back
(``client``: ``KeelClient``), dead letters (``dead_letters``), human-task decisions
(``human_task_decisions``), exported histories (``history_io``), migration requests
(``migration_requests``), runs found by filter (``run_search``) and schedules
(``schedule_client``; ``schedule_ticks``, the tick activity of ``keel.schedule``).

Used by the CLI, the connector, the engine and applications; may import the I/O adapters,
telemetry, records, trust, the application object, codec, settings and the domain.
"""
