"""Every console prints strings as written (orchestrator/cli/output.py): an id, a name or an
error holding rich markup (``[red]``) or an emoji code (``:fire:``) is not interpreted
(issue 44: an id holding ``:fire:`` printed an emoji in error lines)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from orchestrator.cli.output import LazyConsole, new_console, styled

ROOT = Path(__file__).resolve().parents[3]


def test_no_console_reads_markup_or_emoji_even_when_a_print_asks() -> None:
    out = io.StringIO()
    console = LazyConsole(file=out, width=200, markup=True, emoji=True)
    console.print("id a:fire:b [red]x[/red]", markup=True, emoji=True)
    console.print(styled(("diverged:", "red"), " :fire: [bold]y"))
    plain = new_console(file=io.StringIO(), width=200, emoji=True)
    plain.print("[bold]z[/bold] :fire:")
    assert out.getvalue() == "id a:fire:b [red]x[/red]\ndiverged: :fire: [bold]y\n"
    assert plain.file.getvalue() == "[bold]z[/bold] :fire:\n"  # type: ignore[attr-defined]


def test_every_console_of_the_product_and_the_tools_is_made_plain() -> None:
    made = re.compile(r"\bConsole\(")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("orchestrator", "ops", "handlers", "connectors")
        for path in sorted((ROOT / top).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != "orchestrator/cli/output.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if made.search(line) and "LazyConsole(" not in line
    ]
    assert found == []
