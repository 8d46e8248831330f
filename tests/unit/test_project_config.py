"""``[tool.keel]`` of the project's pyproject.toml: found from the working directory upwards,
below the environment and flags, strict about names and secrets (orchestrator/config/project_config.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.cli.app_spec import DEFAULT_APP, app_from, app_spec
from orchestrator.config.project_config import find_project, find_pyproject
from orchestrator.config.settings import load_settings
from orchestrator.domain.model.errors import ConfigError

SHOP = """
from orchestrator.examples import app as shop_app
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project with a nested working directory; no KEEL_* variable set."""
    for name in ("KEEL_APP", "KEEL_TOPIC_PREFIX", "KEEL_PARTITIONS", "KEEL_HOME"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "shop"\n\n[tool.keel]\n'
        'app = "shop_mod:shop_app"\ntopic_prefix = "shop"\npartitions = 3\nhome = "state"\n'
    )
    nested = tmp_path / "src" / "deep"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    return tmp_path


def _write(project: Path, table: str) -> None:
    (project / "pyproject.toml").write_text(f'[project]\nname = "shop"\n\n[tool.keel]\n{table}')


def test_the_nearest_pyproject_is_found_from_a_nested_folder(project: Path) -> None:
    assert find_pyproject() == project / "pyproject.toml"
    found = find_project()
    assert found.is_users and found.table["topic_prefix"] == "shop"


def test_the_file_sets_settings_and_its_paths_are_the_projects(project: Path) -> None:
    settings = load_settings()
    assert (settings.topic_prefix, settings.partitions, settings.app) == (
        "shop",
        3,
        "shop_mod:shop_app",
    )
    assert settings.home == project / "state"  # not the nested working directory's


def test_precedence_is_flag_then_environment_then_file_then_default(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_TOPIC_PREFIX", "from-env")
    assert load_settings().topic_prefix == "from-env"
    assert load_settings(topic_prefix="from-flag").topic_prefix == "from-flag"
    assert load_settings().replication_factor == 1  # neither: the default


def test_an_unknown_key_is_refused_naming_it_and_the_file(project: Path) -> None:
    _write(project, 'topic_prefx = "shop"\n')
    with pytest.raises(ConfigError, match=r"topic_prefx in \[tool.keel\] of .*pyproject.toml"):
        load_settings()


def test_a_secret_in_the_file_is_refused(project: Path) -> None:
    _write(project, f'task_token_secret = "{"s" * 40}"\n')
    with pytest.raises(ConfigError, match="a secret does not belong in a committed file"):
        load_settings()


def test_a_bad_value_names_the_file_not_a_variable(project: Path) -> None:
    _write(project, 'topic_prefix = "no spaces"\n')
    with pytest.raises(
        ConfigError, match=r"topic_prefix=no spaces in \[tool.keel\] of .*pyproject.toml: "
    ):
        load_settings()


def test_no_pyproject_means_the_environment_and_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KEEL_TOPIC_PREFIX", raising=False)
    monkeypatch.chdir(tmp_path)
    if find_pyproject() is not None:
        pytest.skip("a pyproject.toml above the temporary folder")
    assert load_settings().topic_prefix == "keel"


def test_the_app_is_the_flag_then_keel_app_then_the_file(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert app_spec(None) == "shop_mod:shop_app"
    monkeypatch.setenv("KEEL_APP", "env_mod:app")
    assert app_spec(None) == "env_mod:app"
    assert app_spec("flag_mod:app") == "flag_mod:app"


def test_a_users_project_without_an_app_refuses_the_bundled_example(project: Path) -> None:
    _write(project, 'topic_prefix = "shop"\n')
    with pytest.raises(ConfigError, match=r"has no app in \[tool.keel\]"):
        app_spec(None)


def test_keels_own_checkout_keeps_the_bundled_example_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KEEL_APP", raising=False)
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # this checkout: [project] keel
    assert app_spec(None) == DEFAULT_APP


def test_the_app_module_is_imported_from_the_project_and_the_working_directory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "shop_mod.py").write_text(SHOP)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "shop_mod", raising=False)
    assert app_from(None).name  # from the project's folder, two levels up
    (Path.cwd() / "here_mod.py").write_text(SHOP)
    assert app_from("here_mod:shop_app").name  # uvicorn's way: the working directory
