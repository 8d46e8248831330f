"""The public face: what an application imports from ``orchestrator``, and nothing heavy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator
from tests.unit.test_doc_snippets import foreign_imports


def test_every_public_name_resolves() -> None:
    for name in orchestrator.__all__:
        assert getattr(orchestrator, name) is not None, name


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


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert sorted(orchestrator.__all__) == sorted(orchestrator._EXPORTS)


#: Every name an application may import from ``orchestrator``, pinned: adding one is a
#: decision (the docs and this list change with it), removing one breaks applications.
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
    # activities
    "activity",
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
    "register",
    "StartWorkflow",
    "SignalWorkflow",
    "CancelWorkflow",
    # webhook sources
    "WebhookSource",
    "Signal",
    "Start",
    "RouteError",
    "SignatureScheme",
    "WebhookEvent",
    # LLM steps
    "llm_step",
    "agent_step",
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


def test_each_public_name_is_the_object_its_home_module_defines() -> None:
    """The face re-exports; it never wraps (``isinstance`` and ``is`` hold across paths)."""
    import importlib

    for name, module in orchestrator._EXPORTS.items():
        assert getattr(orchestrator, name) is getattr(importlib.import_module(module), name)


def test_dir_lists_the_public_names() -> None:
    assert set(dir(orchestrator)) >= PUBLIC_NAMES


ROOT = Path(__file__).resolve().parents[2]
#: The applications Keel ships or tests with: written against the face like any other.
APPLICATIONS = sorted(
    [
        *(ROOT / "orchestrator" / "examples").glob("*.py"),
        ROOT / "connectors" / "examples.py",
        ROOT / "ops" / "bench_app.py",
        *(ROOT / "tests" / "integration").glob("*_app.py"),
        *(ROOT / "tests" / "fault").glob("*_app.py"),
    ]
)
#: Other applications an application may build on (their workflows, handlers and models).
OTHER_APPS = re.compile(r"orchestrator\.examples(\..+)?|tests\.(integration|fault)\.\w+_app")


@pytest.mark.parametrize("path", APPLICATIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_application_imports_only_the_public_face(path: Path) -> None:
    bad = [
        imported
        for imported in foreign_imports(path.read_text(encoding="utf-8"))
        if not OTHER_APPS.fullmatch(imported.split(": ", 1)[1])
    ]
    assert bad == [], f"{path.relative_to(ROOT)} imports past `orchestrator`: {bad}"


def test_the_applications_are_found() -> None:
    names = {p.name for p in APPLICATIONS}
    assert {"invoices.py", "examples.py", "worker_app.py", "travel_sagas_app.py"} <= names


def test_the_old_compatibility_paths_are_gone() -> None:
    import importlib.util

    for gone in (
        "orchestrator.definitions",
        "orchestrator.bench",
        "orchestrator.errors",
        "connectors.ledger",
    ):
        assert importlib.util.find_spec(gone) is None, gone
    import orchestrator.settings

    assert not hasattr(orchestrator.settings, "SettingsError")
