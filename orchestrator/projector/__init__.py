"""The projector, one process (or a child / thread of the orchestrator): events into the
Redis read model (``projector``, ``projector_child``, ``placement``, ``feed_cursor``), the
rows it writes (``read_model_rows``, ``history_entries``, ``llm_usage``) and the committed
events the orchestrator hands it (``committed``, ``committed_pipe``).

May import the I/O adapters, ``orchestrator.runtime``, the application object, codec,
settings and the domain; never another process (import-linter checks it).
"""
