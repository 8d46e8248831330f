"""The Redis adapter: the read model (``read_model``), the human-task inbox
(``tasks_read_model``), waiting on a row's changes (``row_watch``) and the key layout
(``keyspace``). Imports what :mod:`orchestrator.io` allows."""
