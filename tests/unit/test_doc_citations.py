"""A comment or docstring that cites a section of a page under docs/ names one that exists:
today's page for ``docs/<page>.md, "Section"``, the revision's for
``git show REV:docs/performance.md, "Section"`` (the measurement notebooks live in git).
A section is a heading of the page that starts with the cited words."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PERFORMANCE = "docs/performance.md"
CODE = ("orchestrator", "handlers", "connectors", "ops", "tests")
_CITED = re.compile(
    r"(?:git show (?P<rev>[0-9a-f]{7,40}):)?(?P<page>docs/[\w/-]+\.md)(?P<at> at [0-9a-f]{7,40})?"
    r"(?:,\s*|\s*\()\"(?P<section>[^\"]+)\""
)
_MARKS = re.compile(r"^\s*(?:#:?|\*)?\s*", re.MULTILINE)


def _headings(text: str) -> list[str]:
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


def citations() -> list[tuple[str, str, str | None, str]]:
    """(file, page, revision or None, section) of every citation, comments joined across
    lines; an apostrophe escaped in a Python string counts as one."""
    found = []
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if "docs/" not in text or path == Path(__file__).resolve():
                continue
            assert f"{PERFORMANCE} at " not in text, f"{path}: cite 'git show REV:{PERFORMANCE}'"
            joined = " ".join(_MARKS.sub("", text).split())
            for m in _CITED.finditer(joined):
                section = m["section"].replace("\\'", "'")
                found.append((str(path.relative_to(ROOT)), m["page"], m["rev"], section))
    return found


CITED = citations()


def test_citations_are_found() -> None:
    assert any(rev is None for _, _, rev, _ in CITED) and any(rev for _, _, rev, _ in CITED)
    assert {page for _, page, _, _ in CITED} > {PERFORMANCE, "docs/operations.md"}


@pytest.mark.parametrize(("path", "page", "rev", "section"), CITED)
def test_each_cited_section_exists(path: str, page: str, rev: str | None, section: str) -> None:
    if rev is None:
        assert (ROOT / page).is_file(), f"{path}: no page {page}"
        text = (ROOT / page).read_text(encoding="utf-8")
    else:
        shown = subprocess.run(
            ["git", "show", f"{rev}:{page}"], cwd=ROOT, capture_output=True, text=True
        )
        if shown.returncode != 0:
            pytest.skip(f"{rev} is not in this checkout")
        text = shown.stdout
    headings = _headings(text)
    assert any(h.startswith(section) for h in headings), f"{path}: no section '{section}' in {page}"
