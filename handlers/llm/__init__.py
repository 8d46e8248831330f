"""LLM nodes: bounded model calls whose accepted results are recorded facts.

See docs/llm-nodes.md. An LLM node is an ordinary Step whose activity is a built-in
LLM activity registered by :func:`llm_step` (one call, versioned output schema, repair,
risk flags, cache) or :func:`agent_step` (a bounded tool-using loop).

A part of the worker process: may import what the worker may (``store`` is its Redis
adapter, the record of model calls), never another process.
"""

from handlers.llm.agent import AgentCall, AgentExhausted, Exhaustion, StopReason, agent_step
from handlers.llm.cache import CachePolicy, CacheStatus, content_hash
from handlers.llm.llm_settings import LlmSettings, load_llm_settings
from handlers.llm.node import (
    INVALID_OUTPUT,
    InvalidModelOutput,
    LlmCall,
    OnInvalid,
    RiskRule,
    confidence_below,
    has_flag,
    llm_step,
)
from handlers.llm.prompts import PromptRegistry, PromptTemplate, load_prompt, prompts
from handlers.llm.providers import (
    ChatRequest,
    ChatResponse,
    OpenAIProvider,
    ProviderRefused,
    ProviderUnavailable,
    ScriptedProvider,
)
from handlers.llm.runtime import LlmRuntime, Pricing, configure
from handlers.llm.store import LlmStore
from handlers.llm.tools import Tool

__all__ = [
    "INVALID_OUTPUT",
    "AgentCall",
    "AgentExhausted",
    "CachePolicy",
    "CacheStatus",
    "ChatRequest",
    "ChatResponse",
    "Exhaustion",
    "InvalidModelOutput",
    "LlmCall",
    "LlmRuntime",
    "LlmSettings",
    "LlmStore",
    "OnInvalid",
    "OpenAIProvider",
    "Pricing",
    "PromptRegistry",
    "PromptTemplate",
    "ProviderRefused",
    "ProviderUnavailable",
    "RiskRule",
    "ScriptedProvider",
    "StopReason",
    "Tool",
    "agent_step",
    "confidence_below",
    "configure",
    "content_hash",
    "has_flag",
    "llm_step",
    "load_llm_settings",
    "load_prompt",
    "prompts",
]
