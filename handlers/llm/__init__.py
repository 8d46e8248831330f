"""LLM nodes: bounded model calls whose accepted results are recorded facts.

See docs/llm-nodes.md. An LLM node is an ordinary Step whose activity is a built-in
LLM activity registered by ``app.llm_step`` with an ``LlmCall`` (one call, versioned output
schema, repair, risk flags, cache) or an ``AgentCall`` (a bounded tool-using loop).

Declaring a step (``node``, ``agent``, ``prompts``, ``cache``, ``tools``, ``chat``) loads no
I/O client: an application imports these through the public face (``orchestrator.llm``).
Running one is the worker's: ``runtime`` loads the HTTP provider (``providers``, aiohttp)
and the Redis record of model calls (``store``) on first use. May import what the worker
may, never another process. No names are re-exported here: import
each from its module.
"""
