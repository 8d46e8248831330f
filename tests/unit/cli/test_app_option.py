"""Every command that reads a deployment takes ``--app`` the same way (issue 46: some
refused it with "No such option: --app"); none defaults to the bundled example by itself."""

from __future__ import annotations

from typing import Any

import typer.main

from orchestrator.cli import app

#: The commands with no --app: they run the bundled invoice pipeline or the local stack,
#: or need no application at all (topics).
WITHOUT_APP = {
    "bench",
    "demo",
    "topics create",
    "infra up",
    "infra status",
    "infra down",
    "infra fetch",
    "invoices submit",
}


def _commands(command: Any, path: tuple[str, ...] = ()) -> dict[str, Any]:
    if hasattr(command, "commands"):
        found: dict[str, Any] = {}
        for name, sub in command.commands.items():
            found.update(_commands(sub, (*path, name)))
        return found
    return {" ".join(path): command}


def _app_option(command: Any) -> Any:
    return next((p for p in command.params if "--app" in p.opts), None)


def test_every_command_of_a_deployment_takes_app() -> None:
    commands = _commands(typer.main.get_command(app))
    lacking = {name for name, command in commands.items() if _app_option(command) is None}
    assert lacking == WITHOUT_APP
    for name in ("projections status", "workflow verify", "human-tasks list", "dlq list"):
        assert name in commands


def test_no_app_option_has_a_default_of_its_own() -> None:
    """The default is resolved in the command (flag > KEEL_APP > [tool.keel] app), so
    the option itself never names the bundled example app."""
    for name, command in _commands(typer.main.get_command(app)).items():
        option = _app_option(command)
        if option is not None:
            assert option.default is None, name
            assert option.envvar is None, name  # KEEL_APP is read by the settings


def test_the_app_option_help_shows_the_tool_keel_table() -> None:
    """Rich reads ``[tool.keel]`` as markup unless escaped: the help said "app in  of"."""
    from typer.testing import CliRunner

    from orchestrator.cli import app as cli

    shown = " ".join(CliRunner().invoke(cli, ["workflow", "start", "--help"]).output.split())
    assert "else app in [tool.keel] of the" in shown.replace("│ ", "").replace(" │", "")
