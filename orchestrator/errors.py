"""Keel's errors, re-exported for applications: one root, :class:`KeelError`.

They live in the pure domain (``orchestrator.domain.errors``) so every layer can raise
them where a problem is found.
"""

from orchestrator.domain.errors import (
    CommandRejected,
    ConfigError,
    DefinitionError,
    HistoryError,
    InvalidIdError,
    InvalidInputError,
    KeelError,
    LimitExceededError,
    NotFoundError,
    UnavailableError,
    UnknownWorkflowError,
)

__all__ = [
    "CommandRejected",
    "ConfigError",
    "DefinitionError",
    "HistoryError",
    "InvalidIdError",
    "InvalidInputError",
    "KeelError",
    "LimitExceededError",
    "NotFoundError",
    "UnavailableError",
    "UnknownWorkflowError",
]
