"""Keel: a durable, event-sourced workflow orchestrator on Apache Kafka.

This package is the public face, and the only one, an application imports
(docs/workflows.md, docs/activities.md): the application object, the definitions API and
the words it is written in, the context a definition's functions read, the activity
helpers, sensitive fields, compensation, sagas, webhook sources, LLM steps and the
errors. Everything else (the domain's internals, the Kafka and Redis runtime, the
processes, the CLI) stays behind the processes that run it and may change between
releases; the docs' examples import from here only (tests/unit/test_doc_snippets.py).

Names load lazily, so ``import orchestrator`` is cheap and pulls in no I/O client; so does
every name an application declares with, the LLM steps' included (tests/unit/test_layers.py).
The client (``KeelClient``, docs/client.md) is I/O by nature: it loads the Kafka and Redis
clients when it is first named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # the application object
    "KeelApp": "orchestrator.application.app",
    "load_app": "orchestrator.application.app",
    # per-type limits of an activity (docs/limits.md, "Per-type limits")
    "RateLimit": "orchestrator.application.activity_limits",
    # definitions: a workflow, its states, steps, transitions and waits
    "WorkflowDefinition": "orchestrator.domain.authoring.definitions",
    "State": "orchestrator.domain.authoring.definitions",
    "Step": "orchestrator.domain.authoring.definitions",
    "Transition": "orchestrator.domain.authoring.definitions",
    "TimerWait": "orchestrator.domain.authoring.definitions",
    "SignalWait": "orchestrator.domain.authoring.definitions",
    "RetryPolicy": "orchestrator.domain.authoring.definitions",
    "HumanTask": "orchestrator.domain.authoring.waits",
    "Escalation": "orchestrator.domain.authoring.waits",
    "Compensation": "orchestrator.domain.authoring.policies",
    "Migration": "orchestrator.domain.authoring.migrations",
    "Context": "orchestrator.domain.authoring.run_context",
    # read-only queries over a run's state (docs/workflows.md, "Queries")
    "Query": "orchestrator.domain.authoring.queries",
    "QueryContext": "orchestrator.domain.authoring.queries",
    "QueryError": "orchestrator.domain.authoring.queries",
    # business keys runs are found by (docs/run-search.md)
    "SearchAttribute": "orchestrator.domain.authoring.search_attributes",
    "SearchKind": "orchestrator.domain.authoring.search_attributes",
    # the vocabulary a definition is written in (each member equals its string)
    "OnUnknown": "orchestrator.domain.model.vocabulary",
    "ItemFailurePolicy": "orchestrator.domain.model.vocabulary",
    "ParentClosePolicy": "orchestrator.domain.model.vocabulary",
    "OnExhausted": "orchestrator.domain.model.vocabulary",
    "OnCancel": "orchestrator.domain.model.vocabulary",
    "OnExpiry": "orchestrator.domain.model.vocabulary",
    "HumanDecision": "orchestrator.domain.model.vocabulary",
    "WorkflowStatus": "orchestrator.domain.model.vocabulary",
    # fields sealed outside their handler (docs/secrets.md)
    "Sensitive": "orchestrator.trust.sealing",
    "SealedValue": "orchestrator.trust.sealing",
    # activities
    "activity": "handlers.sdk.activity_context",
    "ActivityContext": "handlers.sdk.activity_context",
    "side_effect": "handlers.sdk.markers",
    "ActivityError": "handlers.sdk.activity_errors",
    "TransientError": "handlers.sdk.activity_errors",
    "PermanentError": "handlers.sdk.activity_errors",
    "OutcomeUnknownError": "handlers.sdk.activity_errors",
    # sagas across workflows (docs/sagas.md) and the commands they emit
    "Saga": "orchestrator.application.saga_declarations",
    "Emit": "orchestrator.application.saga_declarations",
    "SagaFact": "orchestrator.application.saga_declarations",
    "SagaView": "orchestrator.application.saga_declarations",
    "register": "orchestrator.application.saga_declarations",
    "StartWorkflow": "orchestrator.domain.model.messages",
    "SignalWorkflow": "orchestrator.domain.model.messages",
    "CancelWorkflow": "orchestrator.domain.model.messages",
    # webhook sources (docs/connector.md)
    "WebhookSource": "orchestrator.application.webhook_sources",
    "Signal": "orchestrator.application.webhook_sources",
    "Start": "orchestrator.application.webhook_sources",
    "RouteError": "orchestrator.application.webhook_sources",
    "SignatureScheme": "orchestrator.application.webhook_sources",
    "WebhookEvent": "orchestrator.application.webhook_sources",
    # LLM steps (docs/llm-nodes.md)
    "llm_step": "handlers.llm.node",
    "LlmCall": "handlers.llm.node",
    "OnInvalid": "handlers.llm.node",
    "RiskRule": "handlers.llm.node",
    "confidence_below": "handlers.llm.node",
    "has_flag": "handlers.llm.node",
    "INVALID_OUTPUT": "handlers.llm.node",
    "agent_step": "handlers.llm.agent",
    "AgentCall": "handlers.llm.agent",
    "PromptTemplate": "handlers.llm.prompts",
    "prompts": "handlers.llm.prompts",
    "load_prompt": "handlers.llm.prompts",
    "Tool": "handlers.llm.tools",
    "CachePolicy": "handlers.llm.cache",
    "Pricing": "handlers.llm.runtime",
    # errors
    "KeelError": "orchestrator.domain.model.errors",
    "DefinitionError": "orchestrator.domain.model.errors",
    "InvalidInputError": "orchestrator.domain.model.errors",
    "InvalidIdError": "orchestrator.domain.model.errors",
    "LimitExceededError": "orchestrator.domain.model.errors",
    "UnknownWorkflowError": "orchestrator.domain.model.errors",
    "NotFoundError": "orchestrator.domain.model.errors",
    "CommandRejected": "orchestrator.domain.model.errors",
    "ConfigError": "orchestrator.domain.model.errors",
    "UnavailableError": "orchestrator.domain.model.errors",
    "WorkflowIdConflictError": "orchestrator.domain.model.errors",
    # the client: start, signal, cancel, wait from an application (docs/client.md)
    "KeelClient": "orchestrator.client.client",
    "StartResult": "orchestrator.client.client",
    "QueryAnswer": "orchestrator.client.query_answers",
    "RunFilter": "orchestrator.client.run_search",
    "RunPage": "orchestrator.client.run_search",
    "RunRow": "orchestrator.client.run_search",
    "Settings": "orchestrator.settings",
    "load_settings": "orchestrator.settings",
}

__all__ = [
    "INVALID_OUTPUT",
    "ActivityContext",
    "ActivityError",
    "AgentCall",
    "CachePolicy",
    "CancelWorkflow",
    "CommandRejected",
    "Compensation",
    "ConfigError",
    "Context",
    "DefinitionError",
    "Emit",
    "Escalation",
    "HumanDecision",
    "HumanTask",
    "InvalidIdError",
    "InvalidInputError",
    "ItemFailurePolicy",
    "KeelApp",
    "KeelClient",
    "KeelError",
    "LimitExceededError",
    "LlmCall",
    "Migration",
    "NotFoundError",
    "OnCancel",
    "OnExhausted",
    "OnExpiry",
    "OnInvalid",
    "OnUnknown",
    "OutcomeUnknownError",
    "ParentClosePolicy",
    "PermanentError",
    "Pricing",
    "PromptTemplate",
    "Query",
    "QueryAnswer",
    "QueryContext",
    "QueryError",
    "RateLimit",
    "RetryPolicy",
    "RiskRule",
    "RouteError",
    "RunFilter",
    "RunPage",
    "RunRow",
    "Saga",
    "SagaFact",
    "SagaView",
    "SealedValue",
    "SearchAttribute",
    "SearchKind",
    "Sensitive",
    "Settings",
    "Signal",
    "SignalWait",
    "SignalWorkflow",
    "SignatureScheme",
    "Start",
    "StartResult",
    "StartWorkflow",
    "State",
    "Step",
    "TimerWait",
    "Tool",
    "TransientError",
    "Transition",
    "UnavailableError",
    "UnknownWorkflowError",
    "WebhookEvent",
    "WebhookSource",
    "WorkflowDefinition",
    "WorkflowIdConflictError",
    "WorkflowStatus",
    "activity",
    "agent_step",
    "confidence_below",
    "has_flag",
    "llm_step",
    "load_app",
    "load_prompt",
    "load_settings",
    "prompts",
    "register",
    "side_effect",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time names load on first use
    from handlers.llm.agent import (
        AgentCall,
        agent_step,
    )
    from handlers.llm.cache import (
        CachePolicy,
    )
    from handlers.llm.node import (
        INVALID_OUTPUT,
        LlmCall,
        OnInvalid,
        RiskRule,
        confidence_below,
        has_flag,
        llm_step,
    )
    from handlers.llm.prompts import (
        PromptTemplate,
        load_prompt,
        prompts,
    )
    from handlers.llm.runtime import (
        Pricing,
    )
    from handlers.llm.tools import (
        Tool,
    )
    from handlers.sdk.activity_context import (
        ActivityContext,
        activity,
    )
    from handlers.sdk.activity_errors import (
        ActivityError,
        OutcomeUnknownError,
        PermanentError,
        TransientError,
    )
    from handlers.sdk.markers import (
        side_effect,
    )
    from orchestrator.application.activity_limits import (
        RateLimit,
    )
    from orchestrator.application.app import (
        KeelApp,
        load_app,
    )
    from orchestrator.application.saga_declarations import (
        Emit,
        Saga,
        SagaFact,
        SagaView,
        register,
    )
    from orchestrator.application.webhook_sources import (
        RouteError,
        Signal,
        SignatureScheme,
        Start,
        WebhookEvent,
        WebhookSource,
    )
    from orchestrator.client.client import (
        KeelClient,
        StartResult,
    )
    from orchestrator.client.query_answers import (
        QueryAnswer,
    )
    from orchestrator.client.run_search import (
        RunFilter,
        RunPage,
        RunRow,
    )
    from orchestrator.domain.authoring.definitions import (
        RetryPolicy,
        SignalWait,
        State,
        Step,
        TimerWait,
        Transition,
        WorkflowDefinition,
    )
    from orchestrator.domain.authoring.migrations import (
        Migration,
    )
    from orchestrator.domain.authoring.policies import (
        Compensation,
    )
    from orchestrator.domain.authoring.queries import (
        Query,
        QueryContext,
        QueryError,
    )
    from orchestrator.domain.authoring.run_context import (
        Context,
    )
    from orchestrator.domain.authoring.search_attributes import (
        SearchAttribute,
        SearchKind,
    )
    from orchestrator.domain.authoring.waits import (
        Escalation,
        HumanTask,
    )
    from orchestrator.domain.model.errors import (
        CommandRejected,
        ConfigError,
        DefinitionError,
        InvalidIdError,
        InvalidInputError,
        KeelError,
        LimitExceededError,
        NotFoundError,
        UnavailableError,
        UnknownWorkflowError,
        WorkflowIdConflictError,
    )
    from orchestrator.domain.model.messages import (
        CancelWorkflow,
        SignalWorkflow,
        StartWorkflow,
    )
    from orchestrator.domain.model.vocabulary import (
        HumanDecision,
        ItemFailurePolicy,
        OnCancel,
        OnExhausted,
        OnExpiry,
        OnUnknown,
        ParentClosePolicy,
        WorkflowStatus,
    )
    from orchestrator.trust.sealing import (
        SealedValue,
        Sensitive,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
