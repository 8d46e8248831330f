"""The orchestrator engine, one process: the single writer of every workflow on its
partitions (``orchestrator``), one batch per transaction (``command_loop``), rebuild from
checkpoint and tail (``recovery``, ``owned``, ``snapshot_records``, ``tail_records``,
``log_scan``), durable timers and retry budgets (``timers``, ``budget``), parked runs
(``parked_redrive``) and local activities (``local_activities``, which run a step through
the worker's own ``AttemptRunner``: the one crossing between processes).

May import the client, the I/O adapters, the runtime, telemetry, records, trust, the
application object, codec, settings and the domain; never another process (import-linter checks it).
"""
