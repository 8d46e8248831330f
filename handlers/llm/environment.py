"""The LLM runtime of a process that runs LLM steps, built from its environment: the
``KEEL_LLM_*`` provider (docs/llm-nodes.md) and the Redis record of model calls under the
process's topic prefix.

The composition root of the worker (and of ``keel orchestrator``, for local steps) makes
one with :func:`llm_runtimes` and gives it to its activity-attempt runner; the provider
(aiohttp) and the store (redis) load when a step first runs. Declaring a step never
imports this module, so an application's code loads neither.
"""

from __future__ import annotations

from handlers.llm.runtime import LlmRuntime, LlmRuntimes
from orchestrator.config.settings import Settings
from orchestrator.io.adapter_hooks import NO_HOOKS, AdapterHooks

__all__ = ["llm_runtimes", "runtime_from_environment"]


def runtime_from_environment(settings: Settings, hooks: AdapterHooks = NO_HOOKS) -> LlmRuntime:
    """The provider (``KEEL_LLM_*``) and the call store (on ``settings``' Redis and prefix,
    wrapped in ``hooks.llm_call_store``)."""
    from handlers.llm.llm_settings import load_llm_settings
    from handlers.llm.providers import provider_from_settings
    from handlers.llm.store import LlmStore

    llm = load_llm_settings()
    store = hooks.llm_call_store(LlmStore.from_url(settings.redis, settings.topic_prefix))
    return LlmRuntime(llm, store, provider_from_settings(llm))


def llm_runtimes(settings: Settings, hooks: AdapterHooks = NO_HOOKS) -> LlmRuntimes:
    """A process's LLM runtime, built on first use on its ``settings``."""
    return LlmRuntimes(lambda: runtime_from_environment(settings, hooks))
