"""The worker process (``worker``: the loop; ``attempt_runner``: one attempt, its context
and its report; ``execution``: one task's input, claim, call and result; ``effects``: the
Redis effect store; ``type_limits``: per-type limits across workers) with its LLM steps
(``llm/``), and the activity SDK (``sdk/``).

The worker may import the client, the I/O adapters, telemetry, records, the runtime and
everything below, never another process (the engine runs local steps through
``attempt_runner`` and ``effects``: the one crossing, named in pyproject.toml). ``sdk/`` is
authoring: it loads no I/O client.
"""
