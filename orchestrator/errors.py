"""Keel's errors, one root (``KeelError``): what the client, the CLI and the
application object raise (a bad definition or input, an unknown workflow, a refused
command, an unavailable broker). The CLI maps each kind to an exit status.

The failure classes a handler raises are in ``orchestrator.activity``. Names load on
first use from the table in ``orchestrator.application.public_face``; imports no I/O client.
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("errors", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from orchestrator.domain.model.errors import CommandRejected as CommandRejected
    from orchestrator.domain.model.errors import ConfigError as ConfigError
    from orchestrator.domain.model.errors import DefinitionError as DefinitionError
    from orchestrator.domain.model.errors import InvalidIdError as InvalidIdError
    from orchestrator.domain.model.errors import InvalidInputError as InvalidInputError
    from orchestrator.domain.model.errors import KeelError as KeelError
    from orchestrator.domain.model.errors import LimitExceededError as LimitExceededError
    from orchestrator.domain.model.errors import NotFoundError as NotFoundError
    from orchestrator.domain.model.errors import UnavailableError as UnavailableError
    from orchestrator.domain.model.errors import UnknownWorkflowError as UnknownWorkflowError
    from orchestrator.domain.model.errors import WorkflowIdConflictError as WorkflowIdConflictError
