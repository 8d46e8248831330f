"""The Redis adapter: the read model (``read_model``), the human-task inbox
(``human_task_inbox``), waiting on a row's changes (``row_watch``) and the key layout
(``keyspace``). Imports what :mod:`orchestrator.io` allows."""
