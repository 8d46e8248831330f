"""The testing role of the public face, and the test kit behind it (docs/testing.md).

What a test imports (``from orchestrator.testing import WorkflowEnvironment``, like
``temporalio.testing``): the in-process environment that runs an application's workflows
on the real engine and worker with a manual clock that skips time (``workflow_environment``,
``run_handles``), one activity run with a chosen context (``activity_environment``), and
``replay`` of a recorded history (``history_replay``). The pytest plugin
(``pytest_plugin``, registered by entry point) gives the fixtures ``keel_env`` and
``keel_stack`` (``real_stack``). Names load on first use, so importing this package, as
pytest does for the plugin, loads nothing but the table in ``orchestrator.application.public_face``.

At the application's edge: may import the processes (the engine, the worker, the
connector's verification), the client, the I/O adapters (the in-memory one), and
everything below them; nothing in the product imports it.
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("testing", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from orchestrator.testing.activity_environment import (
        ActivityEnvironment as ActivityEnvironment,
    )
    from orchestrator.testing.history_replay import replay as replay
    from orchestrator.testing.kit_errors import HistoryInvariantError as HistoryInvariantError
    from orchestrator.testing.kit_errors import ReplayDivergedError as ReplayDivergedError
    from orchestrator.testing.kit_errors import RunBlockedError as RunBlockedError
    from orchestrator.testing.kit_errors import WorkflowFailedError as WorkflowFailedError
    from orchestrator.testing.run_handles import HumanTaskView as HumanTaskView
    from orchestrator.testing.run_handles import RunHandle as RunHandle
    from orchestrator.testing.run_handles import TaskDecision as TaskDecision
    from orchestrator.testing.webhook_deliveries import WebhookReceipt as WebhookReceipt
    from orchestrator.testing.workflow_environment import (
        WorkflowEnvironment as WorkflowEnvironment,
    )
