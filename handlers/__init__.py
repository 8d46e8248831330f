"""The worker process and the activity SDK.

Two rooms in one package, told apart by their imports (pyproject.toml's contracts):

* the SDK an application writes handlers with: ``activity_context`` (``activity()``,
  heartbeats), ``activity_errors`` (failure classes), ``markers`` (``@side_effect``). They
  may import the domain, codec and settings only, and load no I/O client;
* the worker process: ``worker`` (the loop), ``execution`` (one task), ``effects`` (the Redis
  effect store), ``llm/`` (LLM nodes). They may import the client, the I/O adapters, the
  runtime helpers and everything below, never another process (the engine runs local steps
  through ``execution`` and ``effects``: the one crossing, named in pyproject.toml).
"""
