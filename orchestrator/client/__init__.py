"""The client role of the public face, and the package behind it.

What an application imports (``from orchestrator.client import KeelClient``, like
``temporalio.client``): ``KeelClient`` and what it returns, the run filter and page, the
settings it is built from (docs/client.md), and the ``Driver`` whose rules answer runs
that wait, as the people and systems around them would (``keel evaluate --driver``,
docs/evaluation.md; it is pure, so it is defined beside the application object:
``orchestrator.application.driver_rules``). Those names load on first use, so importing
this package, or a module of it, loads nothing but the table in
``orchestrator.application.public_face``.

The modules: validated commands out, the read model and the logs read back (``client``:
``KeelClient``), dead letters (``dead_letters``), human-task decisions
(``human_task_decisions``), exported histories (``history_io``), migration requests
(``migration_requests``), runs found by filter (``run_search``) and schedules
(``schedule_client``; ``schedule_ticks``, the tick activity of ``keel.schedule``).

Used by the CLI, the connector, the engine and applications; may import the I/O adapters,
telemetry, records, trust, the application object, codec, settings and the domain.
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("client", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from orchestrator.application.driver_rules import Driver as Driver
    from orchestrator.application.driver_rules import LlmAnswer as LlmAnswer
    from orchestrator.application.driver_rules import SignalRule as SignalRule
    from orchestrator.application.driver_rules import TaskRule as TaskRule
    from orchestrator.application.driver_rules import WebhookRule as WebhookRule
    from orchestrator.client.client import KeelClient as KeelClient
    from orchestrator.client.client import StartResult as StartResult
    from orchestrator.client.query_answers import QueryAnswer as QueryAnswer
    from orchestrator.client.run_search import RunFilter as RunFilter
    from orchestrator.client.run_search import RunPage as RunPage
    from orchestrator.client.run_search import RunRow as RunRow
    from orchestrator.config.settings import Settings as Settings
    from orchestrator.config.settings import load_settings as load_settings
