"""What an LLM step is declared with (``app.llm_step``, docs/llm-nodes.md): an
``LlmCall`` or a bounded ``AgentCall``, its prompts, tools, cache policy and pricing,
what an invalid output leads to and the risk rules that send a result to a person.

Declaring loads neither the HTTP provider nor the Redis record of model calls (the worker
loads those when it runs a step). Names load on first use from the table in
``orchestrator.application.public_face``.
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("llm", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from handlers.llm.agent import AgentCall as AgentCall
    from handlers.llm.cache import CachePolicy as CachePolicy
    from handlers.llm.node import INVALID_OUTPUT as INVALID_OUTPUT
    from handlers.llm.node import LlmCall as LlmCall
    from handlers.llm.node import OnInvalid as OnInvalid
    from handlers.llm.node import RiskRule as RiskRule
    from handlers.llm.node import confidence_below as confidence_below
    from handlers.llm.node import has_flag as has_flag
    from handlers.llm.prompts import PromptTemplate as PromptTemplate
    from handlers.llm.prompts import load_prompt as load_prompt
    from handlers.llm.prompts import prompts as prompts
    from handlers.llm.runtime import Pricing as Pricing
    from handlers.llm.tools import Tool as Tool
