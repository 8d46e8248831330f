"""The one table of the public face: every name an application imports, the role module
that offers it (``orchestrator.workflow``, ``orchestrator.activity``, ...) and the module
that defines it.

The role modules and the flat face (``orchestrator`` itself, kept for compatibility) are
both generated from :data:`FACE`, so adding a name is one row here; their
``TYPE_CHECKING`` imports (what type checkers read) are pinned to the rows by
tests/unit/test_public_face.py. Names load on first use, so importing a role module loads
nothing but this table.

Imports nothing of Keel: any layer may hold a role face (``orchestrator.client`` and
``orchestrator.sagas`` are packages whose ``__init__`` is one).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = [
    "FACE",
    "ROLES",
    "Role",
    "Row",
    "flat_names",
    "load",
    "names_of",
    "role_module",
]

#: ``app`` is ``orchestrator`` itself: the application object and the old names.
Role = Literal[
    "app",
    "workflow",
    "activity",
    "client",
    "webhooks",
    "llm",
    "sagas",
    "embedding",
    "testing",
    "errors",
]
#: Every role, in the order the face lists them (the ``Literal`` above, read once).
ROLES: tuple[Role, ...] = get_args(Role)


@dataclass(frozen=True, slots=True)
class Row:
    """``name`` in ``role``'s module is ``module``'s ``attr`` (the same name by default).

    ``flat``: also a name of ``orchestrator`` itself (False for a name that only reads
    well qualified, ``activity.context``). ``deprecated``: an old name kept in the flat
    face only; it warns when used and is in no ``__all__``.
    """

    name: str
    role: Role
    module: str
    attr: str = ""
    flat: bool = True
    deprecated: bool = False

    @property
    def source_attr(self) -> str:
        return self.attr or self.name


def _rows(role: Role, module: str, *names: str) -> tuple[Row, ...]:
    return tuple(Row(name, role, module) for name in names)


_DEFS = "orchestrator.domain.authoring.definitions"
_WEBHOOKS = "orchestrator.application.webhook_sources"

FACE: tuple[Row, ...] = (
    # the application object (orchestrator itself)
    *_rows("app", "orchestrator.application.app", "KeelApp", "load_app"),
    # definitions, the words they are written in and what their functions read
    *_rows(
        "workflow",
        _DEFS,
        "WorkflowDefinition",
        "State",
        "Step",
        "Transition",
        "TimerWait",
        "SignalWait",
        "RetryPolicy",
    ),
    *_rows("workflow", "orchestrator.domain.authoring.waits", "HumanTask", "Escalation"),
    *_rows("workflow", "orchestrator.domain.authoring.policies", "Compensation"),
    *_rows("workflow", "orchestrator.domain.authoring.migrations", "Migration"),
    *_rows("workflow", "orchestrator.domain.authoring.run_context", "Context"),
    *_rows(
        "workflow", "orchestrator.domain.authoring.queries", "Query", "QueryContext", "QueryError"
    ),
    *_rows(
        "workflow",
        "orchestrator.domain.authoring.search_attributes",
        "SearchAttribute",
        "SearchKind",
    ),
    *_rows(
        "workflow",
        "orchestrator.domain.model.vocabulary",
        "OnUnknown",
        "ItemFailurePolicy",
        "ParentClosePolicy",
        "OnExhausted",
        "OnCancel",
        "OnExpiry",
        "HumanDecision",
        "WorkflowStatus",
    ),
    # what a handler reads and raises, and how its type is bounded and its fields sealed
    Row("context", "activity", "handlers.sdk.activity_context", attr="activity", flat=False),
    *_rows("activity", "handlers.sdk.activity_context", "ActivityContext"),
    *_rows("activity", "handlers.sdk.markers", "side_effect"),
    *_rows(
        "activity",
        "handlers.sdk.activity_errors",
        "ActivityError",
        "TransientError",
        "PermanentError",
        "OutcomeUnknownError",
    ),
    *_rows("activity", "orchestrator.application.activity_limits", "RateLimit"),
    *_rows("activity", "orchestrator.trust.sealing", "Sensitive", "SealedValue"),
    # the client: start, signal, cancel, query and wait (docs/client.md)
    *_rows("client", "orchestrator.client.client", "KeelClient", "StartResult"),
    *_rows("client", "orchestrator.client.query_answers", "QueryAnswer"),
    *_rows("client", "orchestrator.client.run_search", "RunFilter", "RunPage", "RunRow"),
    *_rows("client", "orchestrator.config.settings", "Settings", "load_settings"),
    # the driver: rules that answer waiting runs for keel evaluate (docs/evaluation.md)
    *(
        Row(name, "client", "orchestrator.application.driver_rules", flat=False)
        for name in ("Driver", "SignalRule", "WebhookRule", "TaskRule", "LlmAnswer")
    ),
    # webhook sources and the actions a route returns (docs/connector.md)
    *_rows(
        "webhooks",
        _WEBHOOKS,
        "WebhookSource",
        "WebhookSignal",
        "WebhookStart",
        "WebhookEvent",
        "SignatureScheme",
        "RouteError",
    ),
    Row("Signal", "app", _WEBHOOKS, attr="WebhookSignal", deprecated=True),
    Row("Start", "app", _WEBHOOKS, attr="WebhookStart", deprecated=True),
    # LLM steps (declared with app.llm_step; docs/llm-nodes.md)
    *_rows(
        "llm",
        "handlers.llm.node",
        "LlmCall",
        "OnInvalid",
        "RiskRule",
        "confidence_below",
        "has_flag",
        "INVALID_OUTPUT",
    ),
    *_rows("llm", "handlers.llm.agent", "AgentCall"),
    *_rows("llm", "handlers.llm.prompts", "PromptTemplate", "prompts", "load_prompt"),
    *_rows("llm", "handlers.llm.tools", "Tool"),
    *_rows("llm", "handlers.llm.cache", "CachePolicy"),
    *_rows("llm", "handlers.llm.runtime", "Pricing"),
    # sagas across workflows (declared with app.saga; docs/sagas.md) and their commands
    *_rows(
        "sagas",
        "orchestrator.application.saga_declarations",
        "Saga",
        "Emit",
        "SagaFact",
        "SagaView",
    ),
    *_rows(
        "sagas",
        "orchestrator.domain.model.messages",
        "StartWorkflow",
        "SignalWorkflow",
        "CancelWorkflow",
    ),
    # Keel's processes in an application's own process (docs/embedding.md); qualified only
    Row("ServiceParts", "embedding", "orchestrator.embedding.service_parts", flat=False),
    # the test kit: an in-process environment with time skipping, replay, one activity
    # (docs/testing.md); qualified only (``orchestrator.testing.WorkflowEnvironment``)
    *(
        Row(name, "testing", f"orchestrator.testing.{module}", flat=False)
        for module, names in (
            ("workflow_environment", ("WorkflowEnvironment",)),
            ("run_handles", ("RunHandle", "HumanTaskView", "TaskDecision")),
            ("activity_environment", ("ActivityEnvironment",)),
            ("webhook_deliveries", ("WebhookReceipt",)),
            ("history_replay", ("replay",)),
            (
                "kit_errors",
                (
                    "WorkflowFailedError",
                    "RunBlockedError",
                    "ReplayDivergedError",
                    "HistoryInvariantError",
                ),
            ),
        )
        for name in names
    ),
    # Keel's own errors, one root (KeelError); the CLI maps each to an exit status
    *_rows(
        "errors",
        "orchestrator.domain.model.errors",
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
    ),
)

_BY_ROLE: dict[str, dict[str, Row]] = {}
for _row in FACE:
    _BY_ROLE.setdefault(_row.role, {})[_row.name] = _row
_FLAT: dict[str, Row] = {row.name: row for row in FACE if row.flat}


def names_of(role: Role) -> list[str]:
    """The ``__all__`` of ``role``'s module: its rows, the deprecated ones left out."""
    return [row.name for row in FACE if row.role == role and not row.deprecated]


def flat_names() -> list[str]:
    """The ``__all__`` of ``orchestrator``: every flat, current name and the role modules."""
    return [name for name, row in _FLAT.items() if not row.deprecated] + [
        role for role in ROLES if role != "app"
    ]


def load(role: Role, name: str, namespace: dict[str, Any]) -> Any:
    """``name`` of ``role``'s module (for ``app``: of the flat face), imported now and kept
    in ``namespace`` so the next lookup is a plain attribute."""
    row = _FLAT.get(name) if role == "app" else _BY_ROLE.get(role, {}).get(name)
    where = "orchestrator" if role == "app" else f"orchestrator.{role}"
    if row is None:
        raise AttributeError(f"module '{where}' has no attribute '{name}'")
    value = getattr(importlib.import_module(row.module), row.source_attr)
    if row.deprecated:
        warnings.warn(
            f"orchestrator.{name} is deprecated: use orchestrator.{row.source_attr} "
            "(docs/architecture.md, 'The public face')",
            DeprecationWarning,
            stacklevel=3,
        )
    else:
        namespace[name] = value
    return value


def role_module(
    role: Role, namespace: dict[str, Any]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` of ``role``'s module (``namespace``: its
    globals), so each role module is its docstring, this line and its typed imports."""
    names = names_of(role)

    def get(name: str) -> Any:
        return load(role, name, namespace)

    def listing() -> list[str]:
        loaded = (n for n in namespace if not n.startswith("_") and n != "annotations")
        return sorted({*names, *loaded})

    return names, get, listing
