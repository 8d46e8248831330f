"""One envelope factory: outside the domain, decoding and the factory itself, no product
module builds an ``Envelope`` by hand (``orchestrator/records/envelopes.py`` says which
constructions stay where), and what the factory builds is what was built by hand before."""

from __future__ import annotations

import ast
from pathlib import Path

from orchestrator.domain.model.messages import (
    ActivityTask,
    CompleteActivity,
    Envelope,
    StartWorkflow,
)
from orchestrator.records.envelopes import command_envelope, report_envelope, stamped

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("orchestrator", "handlers", "connectors", "ops")
#: Where an ``Envelope(...)`` call may stand (the factory's docstring says why).
ALLOWED = (
    "orchestrator/domain/",
    "orchestrator/payload_schemas/codec.py",
    "orchestrator/records/envelopes.py",
    "orchestrator/client/history_io.py",
)


def _hand_built() -> list[str]:
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ALLOWED):
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                if name == "Envelope":
                    found.append(f"{rel}:{node.lineno}")
    return found


def test_no_envelope_is_built_by_hand_outside_the_factory() -> None:
    assert _hand_built() == []


def test_a_command_from_outside_a_run() -> None:
    payload = StartWorkflow("demo", 1, "{}")
    env = command_envelope("m1", "wf", payload, 7, correlation_id="wf", traceparent="00-t")
    assert env == Envelope("m1", "wf", "", 0, "StartWorkflow", 7, payload, None, "wf", "00-t")
    assert env.traceparent == "00-t"


def test_a_report_follows_its_task() -> None:
    task: Envelope[ActivityTask] = Envelope(
        "ev/task",
        "wf",
        "run",
        0,
        "ActivityTask",
        1,
        None,
        "ev",
        "corr",
        "00-task",  # type: ignore[arg-type]
    )
    payload = CompleteActivity("a1", 1, "{}", 0)
    env = report_envelope(task, "r1", payload, 9, "00-worker")
    assert env == Envelope("r1", "wf", "run", 0, "CompleteActivity", 9, payload, "ev/task", "corr")
    assert env.traceparent == "00-worker"


def test_stamped_changes_only_the_clock() -> None:
    cmd = Envelope("m", "wf", "run", 0, "T", 1, object(), "c", "k", "00-x")
    again = stamped(cmd, 5)
    assert (again.recorded_at, again.traceparent) == (5, "00-x")
    assert again == Envelope("m", "wf", "run", 0, "T", 5, cmd.payload, "c", "k")
