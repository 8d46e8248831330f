"""The pytest plugin: its fixtures work in a fresh project's test file, it is registered by
entry point, and loading it costs nothing of Keel."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = "orchestrator.testing.pytest_plugin"

SHOP = """
from datetime import timedelta
from pydantic import BaseModel
from orchestrator import KeelApp, State, Step, TimerWait, Transition, WorkflowDefinition

app = KeelApp("shop")


class Cart(BaseModel):
    cart_id: str


@app.activity("remind")
def remind(cart: dict) -> dict:
    return {"reminded": cart["cart_id"]}


app.workflow(
    WorkflowDefinition(
        "abandoned_cart",
        1,
        Cart,
        [
            State("idle", wait=TimerWait(timedelta(days=3)), transitions=[Transition("remind")]),
            State("remind", steps=[Step("remind", "remind")], complete=lambda c: c.results["remind"]),
        ],
    )
)
"""


@pytest.fixture(autouse=True)
def _this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child sessions import Keel from this checkout (a worktree shares the venv)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def _plugin_args() -> list[str]:
    """``-p`` the plugin unless its entry point is installed (it is, once Keel is)."""
    installed = any(e.value == PLUGIN for e in entry_points(group="pytest11"))
    return [] if installed else ["-p", PLUGIN]


def test_the_plugin_is_declared_as_a_pytest11_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["entry-points"]["pytest11"] == {"keel": PLUGIN}


def test_keel_env_runs_the_projects_app_with_time_skipped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(shop=SHOP)
    pytester.makefile(
        ".toml", pyproject='[project]\nname = "shop"\n[tool.keel]\napp = "shop:app"\n'
    )
    pytester.makepyfile(
        test_cart="""
        from datetime import timedelta

        import pytest

        def test_the_reminder_goes_out_after_three_days(keel_env):
            began = keel_env.now()
            run = keel_env.start("abandoned_cart", {"cart_id": "c-1"})
            assert run.result() == {"reminded": "c-1"}
            assert keel_env.now() - began == timedelta(days=3)

        @pytest.mark.keel_env(activities={"remind": lambda cart: {"reminded": "stub"}})
        def test_the_marker_gives_the_environment_its_stubs(keel_env):
            assert keel_env.start("abandoned_cart", {"cart_id": "c-1"}).result()["reminded"] == "stub"
        """
    )
    args = (*_plugin_args(), "-p", "no:cacheprovider", "--strict-markers")
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=2)


def test_a_keel_app_fixture_of_ones_own_takes_precedence(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(shop=SHOP)
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def keel_app():
            from shop import app
            return app
        """
    )
    pytester.makepyfile(
        test_cart="""
        def test_runs(keel_env):
            assert keel_env.start("abandoned_cart", {"cart_id": "c-2"}).result()
        """
    )
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_keel_stack_is_skipped_with_its_reason_when_none_can_be_had(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        """
        import pytest
        from orchestrator.testing import real_stack

        def _none():
            raise real_stack.StackUnavailable("`keel infra up` failed: java is not installed")

        @pytest.fixture(autouse=True, scope="session")
        def _no_stack():
            real_stack.real_stack, saved = _none, real_stack.real_stack
            yield
            real_stack.real_stack = saved
        """
    )
    pytester.makepyfile(
        test_it="""
        def test_on_the_real_stack(keel_stack):
            raise AssertionError("not reached")
        """
    )
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*keel_stack: `keel infra up` failed: java is not installed*"])


def test_keel_stack_takes_running_servers_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_BOOTSTRAP_SERVERS", "127.0.0.1:39999")
    monkeypatch.setenv("KEEL_REDIS_URL", "redis://127.0.0.1:39998/0")
    pytester.makepyfile(
        test_it="""
        def test_servers(keel_stack):
            assert keel_stack.bootstrap_servers == "127.0.0.1:39999"
            assert keel_stack.source == "environment"
        """
    )
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_loading_the_plugin_loads_nothing_of_keel_but_the_face_table() -> None:
    code = (
        f"import sys, {PLUGIN}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('orchestrator', 'handlers')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == str(
        [
            "orchestrator",
            "orchestrator.application",
            "orchestrator.application.public_face",
            "orchestrator.testing",
            PLUGIN,
        ]
    )
