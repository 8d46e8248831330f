"""Keel: a durable, event-sourced workflow orchestrator on Apache Kafka.

This package is the public face an application imports (docs/workflows.md,
docs/activities.md): the application object, the definitions API, the context a
definition's functions read, the activity helpers and the errors. Everything else —
the Kafka and Redis runtime, the CLI — stays behind the processes that run it.

Names load lazily, so ``import orchestrator`` is cheap and pulls in no I/O client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # the application object
    "KeelApp": "orchestrator.app",
    "load_app": "orchestrator.app",
    # definitions
    "WorkflowDefinition": "orchestrator.domain.definitions",
    "State": "orchestrator.domain.definitions",
    "Step": "orchestrator.domain.definitions",
    "Transition": "orchestrator.domain.definitions",
    "TimerWait": "orchestrator.domain.definitions",
    "SignalWait": "orchestrator.domain.definitions",
    "RetryPolicy": "orchestrator.domain.definitions",
    "Context": "orchestrator.domain.context",
    # activities
    "activity": "handlers.context",
    "side_effect": "handlers.markers",
    "TransientError": "handlers.errors",
    "PermanentError": "handlers.errors",
    "OutcomeUnknownError": "handlers.errors",
    # errors
    "KeelError": "orchestrator.domain.errors",
    "DefinitionError": "orchestrator.domain.errors",
    "InvalidInputError": "orchestrator.domain.errors",
    "InvalidIdError": "orchestrator.domain.errors",
    "LimitExceededError": "orchestrator.domain.errors",
    "UnknownWorkflowError": "orchestrator.domain.errors",
    "NotFoundError": "orchestrator.domain.errors",
    "CommandRejected": "orchestrator.domain.errors",
    "ConfigError": "orchestrator.domain.errors",
    "UnavailableError": "orchestrator.domain.errors",
}

__all__ = [
    "CommandRejected",
    "ConfigError",
    "Context",
    "DefinitionError",
    "InvalidIdError",
    "InvalidInputError",
    "KeelApp",
    "KeelError",
    "LimitExceededError",
    "NotFoundError",
    "OutcomeUnknownError",
    "PermanentError",
    "RetryPolicy",
    "SignalWait",
    "State",
    "Step",
    "TimerWait",
    "TransientError",
    "Transition",
    "UnavailableError",
    "UnknownWorkflowError",
    "WorkflowDefinition",
    "activity",
    "load_app",
    "side_effect",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time names load on first use
    from handlers.context import activity
    from handlers.errors import OutcomeUnknownError, PermanentError, TransientError
    from handlers.markers import side_effect
    from orchestrator.app import KeelApp, load_app
    from orchestrator.domain.context import Context
    from orchestrator.domain.definitions import (
        RetryPolicy,
        SignalWait,
        State,
        Step,
        TimerWait,
        Transition,
        WorkflowDefinition,
    )
    from orchestrator.domain.errors import (
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
