"""The LLM runtime of a process that runs LLM steps, built from its environment: the
``KEEL_LLM_*`` provider (docs/llm-nodes.md) and the Redis record of model calls under the
process's topic prefix.

The worker (and the orchestrator, for local steps) hands :func:`runtime_from_environment`
to ``runtime.use_factory``; declaring a step never imports this module, so an
application's code loads neither aiohttp nor redis.
"""

from __future__ import annotations

from handlers.llm.llm_settings import load_llm_settings
from handlers.llm.providers import provider_from_settings
from handlers.llm.runtime import LlmRuntime
from handlers.llm.store import LlmStore
from orchestrator.settings import load_settings

__all__ = ["runtime_from_environment"]


def runtime_from_environment() -> LlmRuntime:
    keel = load_settings()
    llm = load_llm_settings()
    return LlmRuntime(
        llm, LlmStore.from_url(keel.redis, keel.topic_prefix), provider_from_settings(llm)
    )
