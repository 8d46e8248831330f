"""Webhook deliveries: a body read within the limits, and the id of the command it becomes.

What an application declares about a sender (``WebhookSource``, and the ``Signal`` or
``Start`` its ``route`` returns) lives in the authoring layer,
``orchestrator/application/webhook_sources.py``, so the application object holds its sources without
importing the connector; an application imports them from ``orchestrator``. The command's
message id is a function of (source, event id) alone, so the orchestrator, which ignores a
signal it has seen by message id, ignores a repeat even when the Redis dedupe marker is
gone.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from orchestrator.application.app import KeelApp
from orchestrator.application.webhook_sources import RouteError
from orchestrator.domain.model.errors import InvalidInputError, UnknownWorkflowError
from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.records.fast_json import loads_input

__all__ = ["MAX_BODY_BYTES", "message_id", "parse_body", "signal_refusal"]

#: The largest webhook body accepted (the limit of one JSON value, docs/limits.md).
MAX_BODY_BYTES = MAX_PAYLOAD_BYTES


def message_id(source: str, event_id: str) -> str:
    """The command's message id: the same for every delivery of one event of one source."""
    digest = hashlib.sha256(f"keel-webhook\0{source}\0{event_id}".encode()).hexdigest()
    return digest[:32]


def parse_body(body: bytes, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The JSON object in ``body``, within the limits and the input rule of docs/limits.md
    (no ``NaN``, ``Infinity``, overflowing number or lone surrogate) and no key twice in one
    object (``loads_input``); RouteError with the reason else. Decision bodies are read by
    it too (connectors/human_task_api.py)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RouteError(f"body is not UTF-8: invalid byte at position {exc.start}") from None
    try:
        value = loads_input(text, "body", limit)
    except json.JSONDecodeError as exc:
        raise RouteError(
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except InvalidInputError as exc:
        raise RouteError(str(exc)) from None
    except ValueError as exc:
        raise RouteError(f"body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RouteError(f"body must be a JSON object, got {_json_kind(value)}")
    return value


def _json_kind(value: Any) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def signal_refusal(
    app: KeelApp, workflow_id: str, name: str, row: dict[str, Any] | None
) -> tuple[int, str] | None:
    """Why a signal webhook is answered at once instead of accepted (docs/connector.md,
    "Signals to runs that cannot take them"): (HTTP status, reason), or None to accept it.

    ``row`` is the run as the read model shows it now. No run yet is a ``404``: a sender
    retries, and a signal that came before its start lands once the start has. A finished
    run is a ``409`` and a signal its definition does not declare a ``422``: no retry
    changes those. A run that ends between this look and the orchestrator's decision still
    refuses the signal there (logged and counted, docs/workflows.md)."""
    what = f"signal '{name}' refused"
    if row is None:
        return 404, f"workflow '{workflow_id}' does not exist (yet); {what}"
    status = WorkflowStatus(row["status"])
    if status.is_terminal:
        return 409, f"workflow '{workflow_id}' is {status}; {what}"
    try:
        definition = app.get(row["name"], row["version"])
    except UnknownWorkflowError:
        return None  # a version this connector's app lacks: the orchestrator decides
    if name not in definition.signal_names:
        known = ", ".join(f"'{n}'" for n in sorted(definition.signal_names)) or "none"
        return 422, f"{definition.label} has no signal '{name}' (known: {known}); {what}"
    return None
