"""The Redis adapter: the one factory of its clients, one server or a Sentinel group's
master (``client_factory``), the read model (``read_model``), the human-task inbox
(``human_task_inbox``), waiting on a row's changes (``row_watch``) and the key layout
(``keyspace``). Imports what :mod:`orchestrator.io` allows."""
