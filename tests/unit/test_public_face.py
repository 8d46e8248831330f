"""The public face: what an application imports from ``orchestrator`` and its role modules
(``orchestrator.workflow``, ``orchestrator.activity``, ...), all generated from one table
(``orchestrator.application.public_face.FACE``), and nothing heavy."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import orchestrator
from orchestrator.application.public_face import FACE, ROLES, Row
from tests.unit.test_doc_snippets import foreign_imports

ROOT = Path(__file__).resolve().parents[2]
#: Each role's module (``app``: the package itself, the flat face).
ROLE_MODULES = {role: "orchestrator" if role == "app" else f"orchestrator.{role}" for role in ROLES}


def _rows(role: str, *, deprecated: bool = False) -> set[str]:
    return {r.name for r in FACE if r.role == role and r.deprecated == deprecated}


def _resolve(module: str, row: Row) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(importlib.import_module(module), row.name)


@pytest.mark.parametrize("role", ROLES)
def test_a_role_module_exports_exactly_its_table_rows(role: str) -> None:
    module = importlib.import_module(ROLE_MODULES[role])
    if role == "app":  # the flat face: every flat row of every role, and the role modules
        expected = {r.name for r in FACE if r.flat and not r.deprecated}
        expected |= {r for r in ROLES if r != "app"}
    else:
        expected = _rows(role)
    assert sorted(module.__all__) == sorted(expected)
    assert len(module.__all__) == len(set(module.__all__))
    assert set(dir(module)) >= expected


@pytest.mark.parametrize("row", FACE, ids=lambda r: f"{r.role}.{r.name}")
def test_each_name_resolves_to_the_object_its_home_module_defines(row: Row) -> None:
    """The face re-exports; it never wraps (``isinstance`` and ``is`` hold across paths)."""
    defined = getattr(importlib.import_module(row.module), row.source_attr)
    assert _resolve(ROLE_MODULES[row.role], row) is defined
    if row.flat:
        assert _resolve("orchestrator", row) is defined


def test_the_table_is_consistent() -> None:
    keys = [(r.role, r.name) for r in FACE]
    assert len(keys) == len(set(keys))
    flat = [r.name for r in FACE if r.flat]
    assert len(flat) == len(set(flat)), "a flat name is offered by two roles"
    # a name never shadows a role module
    assert not {r.name for r in FACE} & set(ROLES)
    assert all(not r.deprecated or (r.role == "app" and r.flat) for r in FACE)


def test_the_test_kit_is_a_role_read_qualified() -> None:
    """``orchestrator.testing`` (issue 46) is a role module like ``temporalio.testing``:
    its names are read qualified, never from the flat face."""
    import orchestrator.testing

    assert "testing" in orchestrator.__all__
    assert "WorkflowEnvironment" in orchestrator.testing.__all__
    assert not any(r.flat for r in FACE if r.role == "testing")


def _typed_imports(path: Path) -> dict[str, tuple[str, str]]:
    """What the ``TYPE_CHECKING`` block of a face module tells type checkers: public name ->
    (defining module, name there)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    )
    found: dict[str, tuple[str, str]] = {}
    private: dict[str, tuple[str, str]] = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name
                (private if name.startswith("_") else found)[name] = (node.module, alias.name)
        elif isinstance(node, ast.Assign):
            (target,) = node.targets
            assert isinstance(target, ast.Name) and isinstance(node.value, ast.Name)
            found[target.id] = private.pop(node.value.id)
    assert private == {}
    return found


@pytest.mark.parametrize("role", ROLES)
def test_what_type_checkers_read_is_the_table(role: str) -> None:
    """The ``TYPE_CHECKING`` imports of each face module mirror its rows (mypy cannot read
    a generated ``__all__``); a row added to the table needs its line there."""
    module = importlib.import_module(ROLE_MODULES[role])
    rows = [r for r in FACE if (r.flat if role == "app" else r.role == role)]
    expected = {r.name: (r.module, r.source_attr) for r in rows}
    assert _typed_imports(Path(module.__file__)) == expected


def test_old_names_still_resolve_and_warn() -> None:
    from orchestrator.webhooks import WebhookSignal, WebhookStart

    with pytest.warns(DeprecationWarning, match="use orchestrator.WebhookSignal"):
        assert orchestrator.Signal is WebhookSignal
    with pytest.warns(DeprecationWarning, match="use orchestrator.WebhookStart"):
        assert orchestrator.Start is WebhookStart
    assert "Signal" not in orchestrator.__all__
    assert "Signal" not in orchestrator.webhooks.__all__


def test_activity_is_the_role_module_and_its_old_call_still_works() -> None:
    from orchestrator import activity

    assert activity is sys.modules["orchestrator.activity"]
    with pytest.raises(RuntimeError, match="only available inside an activity handler"):
        activity.context()
    with (
        pytest.warns(DeprecationWarning, match=r"use orchestrator\.activity\.context\(\)"),
        pytest.raises(RuntimeError, match="only available inside an activity handler"),
    ):
        activity()


def _orchestrator_modules_after(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return {m for m in json.loads(done.stdout) if m.split(".")[0] in ("orchestrator", "handlers")}


@pytest.mark.parametrize("role", [r for r in ROLES if r != "app"])
def test_importing_a_role_module_loads_only_the_table(role: str) -> None:
    loaded = _orchestrator_modules_after(f"import orchestrator.{role}")
    assert loaded == {
        "orchestrator",
        "orchestrator.application",  # its __init__ imports nothing
        "orchestrator.application.public_face",
        f"orchestrator.{role}",
    }


def test_a_module_of_the_client_loads_no_more_than_it_needs() -> None:
    """The client's ``__init__`` is its role face; a submodule's user pays only the table."""
    loaded = _orchestrator_modules_after("import orchestrator.client.run_search")
    assert "orchestrator.client.client" not in loaded


def test_every_registration_is_a_method_of_the_app() -> None:
    from orchestrator import KeelApp

    for method in ("activity", "workflow", "webhook", "saga", "llm_step"):
        assert callable(getattr(KeelApp, method)), method
    for gone in ("register", "llm_step", "agent_step"):
        assert gone not in orchestrator.__all__
        with pytest.raises(AttributeError):
            getattr(orchestrator, gone)
    assert not hasattr(KeelApp, "decider"), "the domain's decider stays behind the processes"


def test_an_application_can_be_written_against_the_public_face_alone() -> None:
    from pydantic import BaseModel

    from orchestrator import KeelApp, State, Step, WorkflowDefinition, side_effect

    class In(BaseModel):
        n: int

    app = KeelApp("face")

    @app.activity("double")
    @side_effect
    def double(x: dict) -> dict:
        return {"n": x["n"] * 2}

    app.workflow(
        WorkflowDefinition(
            "face", 1, In, [State("run", steps=[Step("d", "double")], complete=lambda c: 1)]
        )
    )
    app.check()
    assert app.get("face").version == 1


def test_importing_the_package_loads_no_kafka_or_redis_client() -> None:
    code = "import sys, orchestrator; print(sorted(m for m in ('confluent_kafka', 'redis', 'aiohttp') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_names_are_attribute_errors() -> None:
    try:
        orchestrator.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


#: Every name an application may import from ``orchestrator``, pinned: adding one is a
#: decision (the docs and this list change with it), removing one breaks applications (an
#: old name stays as a deprecated alias, outside ``__all__``, where that is cheap).
PUBLIC_NAMES = {
    # the application object
    "KeelApp",
    "load_app",
    "RateLimit",
    # definitions and the words they are written in
    "WorkflowDefinition",
    "State",
    "Step",
    "Transition",
    "TimerWait",
    "SignalWait",
    "HumanTask",
    "Escalation",
    "RetryPolicy",
    "Compensation",
    "Migration",
    "Context",
    "Query",
    "QueryContext",
    "QueryError",
    "SearchAttribute",
    "SearchKind",
    "OnUnknown",
    "ItemFailurePolicy",
    "ParentClosePolicy",
    "OnExhausted",
    "OnCancel",
    "OnExpiry",
    "HumanDecision",
    "WorkflowStatus",
    "Sensitive",
    "SealedValue",
    # the role modules
    "workflow",
    "activity",
    "client",
    "webhooks",
    "llm",
    "sagas",
    "embedding",
    "testing",
    "errors",
    # activities
    "ActivityContext",
    "side_effect",
    "ActivityError",
    "TransientError",
    "PermanentError",
    "OutcomeUnknownError",
    # sagas and the commands they emit
    "Saga",
    "Emit",
    "SagaFact",
    "SagaView",
    "StartWorkflow",
    "SignalWorkflow",
    "CancelWorkflow",
    # webhook sources
    "WebhookSource",
    "WebhookSignal",
    "WebhookStart",
    "RouteError",
    "SignatureScheme",
    "WebhookEvent",
    # LLM steps
    "LlmCall",
    "AgentCall",
    "OnInvalid",
    "RiskRule",
    "confidence_below",
    "has_flag",
    "INVALID_OUTPUT",
    "PromptTemplate",
    "prompts",
    "load_prompt",
    "Tool",
    "CachePolicy",
    "Pricing",
    # errors
    "KeelError",
    "DefinitionError",
    "InvalidInputError",
    "InvalidIdError",
    "LimitExceededError",
    "UnknownWorkflowError",
    "NotFoundError",
    "CommandRejected",
    "ConfigError",
    "UnavailableError",
    "WorkflowIdConflictError",
    # the client (docs/client.md)
    "KeelClient",
    "StartResult",
    "QueryAnswer",
    "RunFilter",
    "RunPage",
    "RunRow",
    "Settings",
    "load_settings",
}


def test_the_exported_names_are_pinned() -> None:
    assert set(orchestrator.__all__) == PUBLIC_NAMES
    assert len(orchestrator.__all__) == len(PUBLIC_NAMES)
    assert _rows("app", deprecated=True) == {"Signal", "Start"}


#: The applications Keel ships or tests with: written against the face like any other.
APPLICATIONS = sorted(
    [
        *(ROOT / "orchestrator" / "examples").glob("*.py"),
        ROOT / "ops" / "bench_app.py",
        *(ROOT / "tests" / "integration").glob("*_app.py"),
        *(ROOT / "tests" / "fault").glob("*_app.py"),
    ]
)
#: Other applications an application may build on (their workflows, handlers and models).
OTHER_APPS = re.compile(r"orchestrator\.examples(\..+)?|tests\.(integration|fault)\.\w+_app")


@pytest.mark.parametrize("path", APPLICATIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_application_imports_only_the_public_face(path: Path) -> None:
    bad = foreign_imports(path.read_text(encoding="utf-8"), allow=OTHER_APPS)
    assert bad == [], f"{path.relative_to(ROOT)} imports past `orchestrator`: {bad}"


def test_the_applications_are_found() -> None:
    names = {p.name for p in APPLICATIONS}
    assert {"invoices.py", "webhook_app.py", "worker_app.py", "travel_sagas_app.py"} <= names


def test_the_old_compatibility_paths_are_gone() -> None:
    import importlib.util

    for gone in (
        "orchestrator.definitions",
        "orchestrator.bench",
        "connectors.ledger",
    ):
        assert importlib.util.find_spec(gone) is None, gone
    import orchestrator.config.settings

    assert not hasattr(orchestrator.config.settings, "SettingsError")
