"""``--app MODULE:ATTR``: which application a command loads, the same way for every command.

Precedence: the flag, then ``KEEL_APP``, then ``app`` in ``[tool.keel]`` of the project's
``pyproject.toml``. With none of them the bundled example app is the default only outside
a user's project (no ``pyproject.toml`` up to the root, or Keel's own checkout, so
``make demo`` and ``keel dev`` run it as before); inside a user's project a command refuses
rather than silently running the example's definitions over the user's events.

The module is imported from the working directory (and the project's folder), as uvicorn
does, so ``--app shop:app`` finds ``shop.py`` beside the shell without ``PYTHONPATH=.``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from orchestrator.application.app import KeelApp
    from orchestrator.config.settings import Settings
    from orchestrator.io.adapter_hooks import AdapterHooks
    from orchestrator.records.clock import Clock

DEFAULT_APP = "orchestrator.examples:app"
AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        help="Application object MODULE:ATTR. Default: KEEL_APP, else app in \\[tool.keel] of "
        "the project's pyproject.toml.",
        show_default=False,
    ),
]


def app_spec(flag: str | None) -> str:
    """The ``MODULE:ATTR`` to load (``ConfigError`` inside a user's project naming none)."""
    from orchestrator.config.project_config import find_project
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import ConfigError

    if flag:
        return flag
    configured = load_settings().app  # KEEL_APP, else [tool.keel] app
    if configured:
        return configured
    project = find_project()
    if project.is_users:
        raise ConfigError(
            f"which application? {project.path} has no app in [tool.keel]: add "
            '[tool.keel] app = "MODULE:ATTR" there, or give --app MODULE:ATTR or KEEL_APP '
            "(the bundled example app is not run for a project of your own)"
        )
    return DEFAULT_APP


def importable_here() -> None:
    """Put the working directory, then the project's folder, first on ``sys.path``."""
    from orchestrator.config.project_config import find_project

    folder = find_project().folder
    for path in reversed([Path.cwd(), *([folder] if folder is not None else [])]):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


def app_from(flag: str | None) -> KeelApp:
    """The application the command runs (``AppLoadError``, a ``ConfigError``, else)."""
    from orchestrator.application.app import load_app

    spec = app_spec(flag)
    importable_here()
    return load_app(spec)


def service_app(
    flag: str | None, clock: Clock | None = None, settings: Settings | None = None
) -> KeelApp:
    """The application with the built-in ``keel.schedule`` and its tick activity
    (docs/schedules.md), for a command that reads or starts runs: ``served_app`` of
    ``orchestrator/embedding/service_parts.py`` on the ``--app`` application."""
    from orchestrator.embedding.service_parts import served_app
    from orchestrator.records.clock import SYSTEM_CLOCK

    return served_app(app_from(flag), clock or SYSTEM_CLOCK, settings)


def adapter_hooks(settings: Settings) -> AdapterHooks:
    """The hooks ``KEEL_ADAPTER_HOOKS`` names, loaded from the project's folder too."""
    from orchestrator.embedding.service_parts import adapter_hooks_of

    importable_here()
    return adapter_hooks_of(settings)


#: ``--app`` of a command that reads no definitions: accepted, so a script can give every
#: command the same ``--app`` (issue 46: "No such option: --app" broke exactly that).
UnusedAppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        help="Accepted like every command's --app; this command reads no definitions.",
        show_default=False,
    ),
]
