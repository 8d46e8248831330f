"""The pure domain's shape: what each module may import, and its vocabulary.

The domain imports nothing but the standard library and pydantic, and no import runs
upward (a lower layer never imports a higher one), so the model reads bottom-up. The rooms
(model, authoring, lifecycle, history) are import-linter layers too (pyproject.toml); this
test orders the modules inside them.
"""

from __future__ import annotations

import ast
import sys
import typing
from pathlib import Path

import pytest

from orchestrator.domain.authoring import definitions as domain_definitions
from orchestrator.domain.model import errors, messages
from orchestrator.domain.model.vocabulary import (
    ActivityStatus,
    PurposeKind,
    TimeoutKind,
    TimerPurpose,
    WorkflowStatus,
)

DOMAIN = Path(__file__).resolve().parents[3] / "orchestrator" / "domain"

#: The rooms, lowest first; a module imports modules of its own room or lower ones only.
ROOMS = ("model", "authoring", "lifecycle", "history")

#: Layers, lowest first; a module may import domain modules of a lower layer only.
LAYERS: dict[str, float] = {
    "errors": 0,
    "frozen_init": 0,
    "vocabulary": 0,
    "keys": 0,
    "fingerprint": 0,
    "irreversible": 0.5,
    "ids": 1,
    "limits": 1,
    "saga_messages": 0.5,
    "migration_messages": 0.5,
    "refusal_messages": 0.5,
    "fan_out_messages": 0.5,
    "messages": 1,
    "state_parts": 1.8,
    "invariants": 1.9,
    "state": 2,
    "upcasting": 1.5,
    "activity_refs": 1.6,
    "run_context": 3,
    "waits": 3.5,
    "policies": 3.7,
    "migrations": 3.9,
    "queries": 3.95,
    "search_attributes": 3.96,
    "steps": 3.97,
    "definitions": 4,
    "run_scope": 4.5,
    "activities": 5,
    "activity_operators": 5.2,
    "signals": 5.3,
    "refusals": 5.3,
    "human_tasks": 5.5,
    "missing_versions": 5.8,
    "compensation": 5.7,
    "fan_out": 5.6,
    "run_starts": 5.9,
    "run_stops": 5.9,
    "run_continues": 5.95,
    "evolve": 6,
    "command_handlers": 7,
    "decider": 8,
    "replay": 9,
    "unknown_outcomes": 9,
}


def _modules() -> dict[str, Path]:
    return {p.stem: p for p in DOMAIN.glob("*/*.py") if p.stem != "__init__"}


def _room(path: Path) -> int:
    return ROOMS.index(path.parent.name)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in {"orchestrator.domain", *(f"orchestrator.domain.{r}" for r in ROOMS)}:
                out.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                out.add(node.module)
    return out


def test_every_domain_module_has_a_layer_and_sits_in_a_room() -> None:
    assert set(_modules()) == set(LAYERS)
    assert {p.name for p in DOMAIN.glob("*.py")} == {"__init__.py"}
    assert sorted(p.name for p in DOMAIN.iterdir() if p.is_dir() and p.name != "__pycache__") == (
        sorted(ROOMS)
    )


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_domain_imports_only_stdlib_pydantic_and_lower_layers(name: str) -> None:
    path = _modules()[name]
    for module in _imports(path):
        top = module.split(".")[0]
        if module.startswith("orchestrator.domain."):
            dep = module.split(".")[-1]
            assert LAYERS[dep] < LAYERS[name], f"{name} imports {dep} (same or higher layer)"
            assert _room(_modules()[dep]) <= _room(path), f"{name} imports {dep} (a higher room)"
        else:
            assert top in sys.stdlib_module_names or top == "pydantic", f"{name} imports {module}"


def test_domain_modules_stay_small() -> None:
    for path in DOMAIN.rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 620, path.name


def test_one_definition_of_each_error() -> None:
    for name in ("DefinitionError", "InvalidInputError", "UnknownWorkflowError"):
        assert getattr(domain_definitions, name) is getattr(errors, name)
    from orchestrator.domain.lifecycle import decider

    assert decider.CommandRejected is errors.CommandRejected
    assert decider.HistoryError is errors.HistoryError


def test_terminal_event_registry_is_derived_from_the_classes() -> None:
    assert set(messages.TERMINAL_EVENTS) == {
        messages.WorkflowCompleted,
        messages.WorkflowFailed,
        messages.WorkflowCancelled,
        messages.WorkflowTerminated,
        messages.WorkflowCompensated,
        messages.WorkflowCompensationFailed,
    }
    assert {c.__name__ for c in messages.TERMINAL_EVENTS} == messages.TERMINAL_EVENT_NAMES
    assert all(cls.KIND == "event" for cls in messages.TERMINAL_EVENTS)


def test_the_command_union_names_every_command() -> None:
    commands = {cls for cls in messages.PAYLOAD_TYPES.values() if cls.KIND == "command"}
    assert len(commands) == 13
    assert set(typing.get_args(messages.Command)) == commands


def test_vocabulary_values_are_their_strings() -> None:
    assert (
        WorkflowStatus.RUNNING == "running" and f"{ActivityStatus.DEAD_LETTERED}" == "dead_lettered"
    )
    assert {s: s.is_terminal for s in WorkflowStatus} == {
        "running": False,
        "waiting": False,
        "needs_attention": False,
        "compensating": False,
        "completed": True,
        "failed": True,
        "compensated": True,
        "compensation_failed": True,
        "cancelled": True,
        "terminated": True,
    }


@pytest.mark.parametrize(
    ("text", "purpose"),
    [
        ("wait", TimerPurpose.wait()),
        ("timeout:go", TimerPurpose.signal_timeout("go")),
        ("retry:run#1/pay", TimerPurpose.retry("run#1/pay")),
        (
            "timeout:heartbeat:run#1/pay/query/2",
            TimerPurpose.activity_timeout(TimeoutKind.HEARTBEAT, "run#1/pay/query/2"),
        ),
        ("timeout:sometimes:x", TimerPurpose.signal_timeout("sometimes:x")),
        ("later", TimerPurpose(PurposeKind.OTHER, "later")),
    ],
)
def test_timer_purposes_format_and_parse_themselves(text: str, purpose: TimerPurpose) -> None:
    assert TimerPurpose.parse(text) == purpose
    assert str(purpose) == text


def test_timer_ids() -> None:
    t = TimerPurpose.activity_timeout(TimeoutKind.START_TO_CLOSE, "run#1/pay")
    assert t.timer_id("", "3") == "run#1/pay/timeout/start_to_close/3"
    assert TimerPurpose.retry("a").timer_id("", "2") == "a/retry/2"
    assert TimerPurpose.wait().timer_id("sleep#1") == "sleep#1/wait"
    assert TimerPurpose.signal_timeout("go").timer_id("hold#2") == "hold#2/timeout"
    with pytest.raises(ValueError):
        TimerPurpose(PurposeKind.OTHER, "x").timer_id("b")
