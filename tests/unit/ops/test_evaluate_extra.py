"""matplotlib is ``keel evaluate``'s alone: an ``[evaluate]`` extra (which ``.[dev]`` and
``make evaluate`` install), not a dependency of the product; without it the command stops
at once with the line that installs it."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

from ops.evaluation.report_plots import require_matplotlib
from orchestrator.domain.model.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def test_matplotlib_is_an_extra_that_dev_and_make_evaluate_install() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("matplotlib")]
    extras = project["optional-dependencies"]
    assert extras["evaluate"] == ["matplotlib>=3.8"]
    assert "keel[evaluate]" in extras["dev"]
    recipe = (ROOT / "Makefile").read_text().split("\nevaluate: setup\n", 1)[1].split("\n\n")[0]
    assert "pip install -q -e '.[evaluate]'" in recipe


def test_keel_evaluate_without_matplotlib_says_how_to_install_it(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    with pytest.raises(ConfigError, match=r"pip install 'keel\[evaluate\]'"):
        require_matplotlib()


def test_with_matplotlib_it_goes_on() -> None:
    require_matplotlib()
