"""The LLM runtime of a process that runs LLM steps, built from its environment: the
``KEEL_LLM_*`` provider (docs/llm-nodes.md) and the Redis record of model calls under the
process's topic prefix.

The worker (and ``keel orchestrator``, for local steps) calls :func:`use_environment`;
the provider (aiohttp) and the store (redis) load when a step first runs. Declaring a
step never imports this module, so an application's code loads neither.
"""

from __future__ import annotations

from handlers.llm.runtime import LlmRuntime, use_factory
from orchestrator.config.settings import Settings
from orchestrator.io.adapter_hooks import NO_HOOKS, AdapterHooks

__all__ = ["runtime_from_environment", "use_environment"]


def runtime_from_environment(
    settings: Settings | None = None, hooks: AdapterHooks = NO_HOOKS
) -> LlmRuntime:
    """The provider (``KEEL_LLM_*``) and the call store (on ``settings``' Redis and prefix,
    wrapped in ``hooks.llm_call_store``)."""
    from handlers.llm.llm_settings import load_llm_settings
    from handlers.llm.providers import provider_from_settings
    from handlers.llm.store import LlmStore
    from orchestrator.config.settings import load_settings

    keel = settings if settings is not None else load_settings()
    llm = load_llm_settings()
    store = hooks.llm_call_store(LlmStore.from_url(keel.redis, keel.topic_prefix))
    return LlmRuntime(llm, store, provider_from_settings(llm))


def use_environment(settings: Settings | None = None, hooks: AdapterHooks = NO_HOOKS) -> None:
    """This process builds its runtime on first use, on its ``settings``."""
    use_factory(lambda: runtime_from_environment(settings, hooks))
