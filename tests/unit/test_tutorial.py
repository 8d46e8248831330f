"""docs/tutorial.md is the whole shop project of docs/tutorial/, file by file, and that
project's own tests pass as a user runs them (``pytest`` in the project's folder, the
kit's plugin loaded by its entry point). ``make lint`` type-checks it with
``mypy --strict``; tests/integration/test_tutorial_on_kafka.py runs its real-stack test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tutorial.md"
PROJECT = ROOT / "docs" / "tutorial"
_FILE_BLOCK = re.compile(
    r"^```(?:python|toml|json) file=(?P<path>\S+)\n(?P<body>.*?)^```$", re.M | re.S
)


def shown_files() -> dict[str, str]:
    return {m["path"]: m["body"] for m in _FILE_BLOCK.finditer(PAGE.read_text())}


def project_files() -> dict[str, str]:
    paths = [
        PROJECT / "pyproject.toml",
        PROJECT / "orders.jsonl",
        *PROJECT.glob("shop/*.py"),
        *PROJECT.glob("tests/*.py"),
    ]
    return {str(p.relative_to(PROJECT)): p.read_text() for p in paths}


def test_the_page_shows_every_file_of_the_project_as_it_is() -> None:
    shown, files = shown_files(), project_files()
    assert sorted(shown) == sorted(files)
    for path, text in files.items():
        assert shown[path] == text, f"docs/tutorial.md shows another {path} than the project's"


def copy_of_project(tmp_path: Path) -> Path:
    """The project as a user has it: its own folder, nothing of Keel's checkout around."""
    where = tmp_path / "shop-project"
    shutil.copytree(PROJECT, where, ignore=shutil.ignore_patterns("__pycache__", "*.db"))
    return where


def run_pytest(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def test_the_tutorials_tests_pass_in_process(tmp_path: Path) -> None:
    out = run_pytest(copy_of_project(tmp_path), "tests/test_orders.py")
    assert re.search(r"\b7 passed\b", out), out[-2000:]
