"""Reusing a workflow id: is a start of an id that already has a run the same start?

The orchestrator records one ``WorkflowStarted`` per workflow id and writes nothing for a
later start of it, so the run the read model shows is the one true run. A start that
finds another run there compares what it asked for with what that ``WorkflowStarted``
recorded: the same workflow name and input (compared by a digest of their canonical JSON,
sealed values opened) join the run; anything else is a
:class:`~orchestrator.domain.model.errors.WorkflowIdConflictError` naming it
(docs/workflows.md, "Reusing a workflow id").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.model.errors import KeelError, WorkflowIdConflictError
from orchestrator.domain.model.fingerprint import canonical_json
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.io.redis.read_model import Projection
from orchestrator.records import fast_json
from orchestrator.trust.sealing import contains_sealed

__all__ = ["RecordedStart", "id_conflict", "input_digest", "read_recorded_start"]

#: Opens every sealed value in a JSON value (the client's keys), or raises a KeelError.
Opener = Callable[[Any], Any]


def input_digest(value: Any, opened: Opener) -> str:
    """SHA-256 of the canonical JSON of ``value`` with its sealed values opened."""
    plain = json.loads(json.dumps(value))  # JSON's own shapes: str keys, lists, no models
    if contains_sealed(plain):
        plain = opened(plain)
    return hashlib.sha256(canonical_json(plain).encode()).hexdigest()


@dataclass(frozen=True)
class RecordedStart:
    """The row of a workflow id and the ``WorkflowStarted`` that began it (read together)."""

    row: dict[str, Any]
    name: str
    input: Any


def read_recorded_start(projection: Projection, workflow_id: str) -> RecordedStart | None:
    """The row and its first history line, read atomically; None while either is missing
    (no run yet, or a rebuild is clearing the read model)."""
    found = projection.get_with_first_line(workflow_id)
    if found is None:
        return None
    row, entry = found
    if entry.get("type") != "WorkflowStarted" or entry.get("seq") != 1:
        return None
    data = entry["data"]
    recorded = data["input"] if "input" in data else _text_value(data.get("input_json"))
    return RecordedStart(row, str(data["name"]), recorded)


def _text_value(text: Any) -> Any:
    """An ``input_json`` the projector kept as text (past the limits): its value if any."""
    try:
        return fast_json.loads_within_limits(text, "input_json")
    except (TypeError, ValueError, RecursionError):
        return text


def id_conflict(
    recorded: RecordedStart, name: str, digest: str, opened: Opener
) -> WorkflowIdConflictError | None:
    """None when a start of ``name`` whose input has ``digest`` is the recorded start,
    else the error naming the run that holds the id."""
    if recorded.name == name:
        try:
            if input_digest(recorded.input, opened) == digest:
                return None
        except KeelError as exc:
            raise KeelError(
                f"workflow '{recorded.row['workflow_id']}' already exists (run "
                f"{recorded.row['run_id']}); its input cannot be compared with this start's: "
                f"{exc}"
            ) from None
    row = recorded.row
    return WorkflowIdConflictError(
        row["workflow_id"],
        row["run_id"],
        row["name"],
        row["version"],
        WorkflowStatus(row["status"]),
        row["started_at"],
        "input" if recorded.name == name else "workflow",
        name,
    )
