"""Keel's pytest plugin (entry point ``pytest11``: ``keel``): the fixtures of docs/testing.md.

* ``keel_app`` — the application under test: ``KEEL_APP``, else ``app`` in ``[tool.keel]``
  of the project's ``pyproject.toml``; override the fixture to name another.
* ``keel_env`` — a :class:`~orchestrator.testing.WorkflowEnvironment` of ``keel_app``: in
  process, no broker, time skipped; its histories are checked against Keel's invariants
  when the test ends. ``@pytest.mark.keel_env(activities=..., start_time=...)`` gives the
  environment's options.
* ``keel_stack`` — a real Kafka and Redis for the session
  (:func:`~orchestrator.testing.real_stack.real_stack`), or the test is skipped with the
  reason there is none; ``keel_stack.settings(tmp_path)`` and ``keel_stack.serve(app, s)``
  run the application on it.

pytest loads this module in every session of a project that has Keel installed, so it
imports nothing of Keel until a fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from orchestrator.application.app import KeelApp
    from orchestrator.testing.real_stack import RealStack
    from orchestrator.testing.workflow_environment import WorkflowEnvironment


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "keel_env(**options): options of the keel_env fixture's WorkflowEnvironment "
        "(activities=, start_time=, partitions=, webhook_secrets=; docs/testing.md)",
    )


@pytest.fixture
def keel_app() -> KeelApp:
    """The application under test (``KEEL_APP``, else ``[tool.keel] app``)."""
    import sys

    from orchestrator.application.app import load_app
    from orchestrator.config.project_config import find_project
    from orchestrator.config.settings import load_settings

    spec = load_settings().app
    if not spec:
        raise pytest.UsageError(
            'keel_app: no application configured: set app = "MODULE:ATTR" in [tool.keel] '
            "of pyproject.toml (or KEEL_APP), or define a keel_app fixture returning your KeelApp"
        )
    folder = find_project().folder
    if folder is not None and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return load_app(spec)


@pytest.fixture
def keel_env(keel_app: KeelApp, request: pytest.FixtureRequest) -> Iterator[WorkflowEnvironment]:
    """An in-process environment of ``keel_app`` with a manual clock (docs/testing.md)."""
    from orchestrator.testing.workflow_environment import WorkflowEnvironment

    marker = request.node.get_closest_marker("keel_env")
    env = WorkflowEnvironment(keel_app, **(marker.kwargs if marker else {}))
    try:
        yield env
    finally:
        env.close()


@pytest.fixture(scope="session")
def keel_stack() -> Iterator[RealStack]:
    """A real Kafka broker and Redis for the session, or a skip saying why there is none."""
    from orchestrator.testing.real_stack import StackUnavailable, real_stack

    try:
        stack = real_stack()
        servers: Any = stack.__enter__()
    except StackUnavailable as exc:
        pytest.skip(f"keel_stack: {exc}")
    try:
        yield servers
    finally:
        stack.__exit__(None, None, None)
