"""The project's configuration: ``[tool.keel]`` in the nearest ``pyproject.toml``.

A user's project says once which application it runs and on which topics, instead of every
command being given ``--app`` and every shell ``KEEL_TOPIC_PREFIX`` again. The file is
found from the working directory upwards, like ruff's or pytest's; its ``[tool.keel]``
keys are the settings' names (``app``, ``topic_prefix``, ``bootstrap_servers``, ...), read
by pydantic-settings' own pyproject source below the environment and any flag
(docs/configuration.md, "The project's pyproject.toml").
"""

from __future__ import annotations

import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, PyprojectTomlConfigSettingsSource

from orchestrator.domain.model.errors import ConfigError

PYPROJECT = "pyproject.toml"
#: Keel's own distribution: its checkout runs the bundled example app by default.
KEEL_PROJECT_NAME = "keel"


@dataclass(frozen=True, slots=True)
class Project:
    """The nearest ``pyproject.toml`` (None: none up to the root) and its ``[tool.keel]``."""

    path: Path | None = None
    table: dict[str, Any] = field(default_factory=dict)
    name: str | None = None

    @property
    def folder(self) -> Path | None:
        return None if self.path is None else self.path.parent

    @property
    def is_users(self) -> bool:
        """A project of the user's own (not Keel's checkout): never given the example app."""
        return self.path is not None and self.name != KEEL_PROJECT_NAME

    def where(self, key: str) -> str:
        """How an error names a setting this file gives: ``key=value in [tool.keel] of PATH``."""
        return f"{key} in [tool.keel] of {self.path}"


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` from ``start`` (the working directory) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PYPROJECT
        if candidate.is_file():
            return candidate
    return None


def find_project(start: Path | None = None) -> Project:
    """The project the working directory is in; a file TOML cannot read is a ``ConfigError``
    (a silently ignored typo would run the wrong app on the wrong topics)."""
    path = find_pyproject(start)
    if path is None:
        return Project()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    table = data.get("tool", {}).get("keel", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.keel] of {path} must be a table")
    name = data.get("project", {}).get("name")
    return Project(path, table, name if isinstance(name, str) else None)


def _holds_path(annotation: Any) -> bool:
    if annotation is Path:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        return any(_holds_path(a) for a in typing.get_args(annotation))
    return False


def _under(folder: Path, value: Any) -> Any:
    """A relative path (or a list of them, or an ``os.pathsep``-separated string) read
    against ``folder``: the file's paths mean the same from any folder of the project."""
    if isinstance(value, list):
        return [_under(folder, v) for v in value]
    if not isinstance(value, str) or not value:
        return value
    parts = [str(folder / p) if p else p for p in value.split(os.pathsep)]
    return os.pathsep.join(parts)


class ProjectSettingsSource(PyprojectTomlConfigSettingsSource):
    """pydantic-settings' pyproject source on the found file (``[tool.keel]``: the
    ``pyproject_toml_table_header`` of ``Settings``), stricter: an unknown key or
    a secret (a committed file is no place for one) is refused, and relative paths are the
    project folder's."""

    def __init__(
        self, settings_cls: type[BaseSettings], project: Project, secrets: frozenset[str]
    ) -> None:
        fields = settings_cls.model_fields
        unknown = sorted(k for k in project.table if k not in fields)
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {', '.join(unknown)} in [tool.keel] of {project.path}; "
                "the names are the KEEL_* variables' in lower case (docs/configuration.md)"
            )
        secret = sorted(k for k in project.table if k in secrets)
        if secret:
            raise ConfigError(
                f"{', '.join(secret)} in [tool.keel] of {project.path}: a secret does not "
                "belong in a committed file; use its KEEL_* variable or *_file setting"
            )
        # no file found: its default, ./pyproject.toml, is absent too, so nothing is read
        super().__init__(settings_cls, toml_file=project.path)
        if project.folder is None:
            return
        for key in list(self.init_kwargs):
            if key in fields and _holds_path(fields[key].annotation):
                self.init_kwargs[key] = _under(project.folder, self.init_kwargs[key])
