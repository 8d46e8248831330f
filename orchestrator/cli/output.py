"""Terminal output for the commands, with rich imported on first use.

The service commands (``keel orchestrator``, ``worker``, ``projector``) print nothing
through these, so their start-up does not load rich (orchestrator/cli/__init__.py). Every
console prints strings as written: markup and emoji are off (``PLAIN``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text


#: No console reads a printed string as rich markup or emoji codes: ids, names, reasons and
#: errors are other people's text, and ``[red]`` or ``:fire:`` in one prints as written
#: (issue 44). Style comes from :func:`styled` instead.
PLAIN: dict[str, Any] = {"markup": False, "emoji": False}


def new_console(**options: Any) -> Console:
    """A :class:`rich.console.Console` with these options, markup and emoji off."""
    from rich.console import Console

    return Console(**{**options, **PLAIN})


class LazyConsole:
    """A console (:func:`new_console`) with these options, made when it first prints; no
    print turns markup or emoji back on."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = new_console(**self._options)
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **{**kwargs, **PLAIN})


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text whose ``(text, style)`` parts are styled and whose plain parts print as written:
    ``styled(("diverged:", "red"), f" {label}")``."""
    from rich.text import Text

    return Text.assemble(*parts)


def new_table(*headers: str) -> Table:
    """A rich table with these column headers."""
    from rich.table import Table

    return Table(*headers)
