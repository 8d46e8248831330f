"""Terminal output for the commands, with rich imported on first use.

The service commands (``keel orchestrator``, ``worker``, ``projector``) print nothing
through these, so their start-up does not load rich (orchestrator/cli/__init__.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


class LazyConsole:
    """A :class:`rich.console.Console` with these options, made when it first prints."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)


def escape(text: str) -> str:
    """``text`` with rich markup escaped, so ``[/bold]`` prints as text."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def new_table(*headers: str) -> Table:
    """A rich table with these column headers."""
    from rich.table import Table

    return Table(*headers)
