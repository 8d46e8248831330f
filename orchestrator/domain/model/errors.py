"""The one error root of Keel and its few meaningful kinds.

Every expected failure is a :class:`KeelError`: the CLI prints its message as one line
and exits 1, services log it without a traceback. Each kind is raised where the problem
is found, so no layer translates one error into another by hand. Pure: the domain,
the runtime and the CLI all import it from here (applications: ``from orchestrator import``).

Every other error class of the product derives from it too (the handlers' ``ActivityError``
family, the codec's ``DecodeError``, the ports' errors, ...); only control-flow signals,
each caught by its one receiver, do not (``tests/unit/test_error_root.py`` lists them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import ValidationError

__all__ = [
    "CommandRejected",
    "ConfigError",
    "DefinitionError",
    "HistoryError",
    "InvalidIdError",
    "InvalidInputError",
    "KeelError",
    "LimitExceededError",
    "NotFoundError",
    "UnavailableError",
    "UnknownWorkflowError",
    "WaitTimeoutError",
    "WorkflowIdConflictError",
    "format_validation_error",
    "iso_utc",
]


class KeelError(Exception):
    """An expected failure whose message is meant for the operator, not a traceback."""


class DefinitionError(KeelError, ValueError):
    """A workflow definition or application is malformed (raised when it is built)."""


class InvalidInputError(KeelError, ValueError):
    """Input refused before anything was written: bad JSON, schema, id or size."""


class InvalidIdError(InvalidInputError):
    """A workflow id breaks the id rule (``orchestrator.domain.model.ids``)."""


class LimitExceededError(InvalidInputError):
    """A value is larger, deeper or longer than a documented limit (docs/limits.md)."""


class UnknownWorkflowError(InvalidInputError):
    """No definition is registered under the requested name or version."""


class NotFoundError(KeelError, LookupError):
    """The thing asked for (a workflow, a dead letter, a task) does not exist."""


class CommandRejected(KeelError):
    """A command that must not change the workflow; the message is a one-line reason."""


class HistoryError(KeelError, ValueError):
    """An event that cannot follow the state it is folded into (corrupt or foreign history)."""


class ConfigError(KeelError, ValueError):
    """A configuration value was refused; the message names the variable."""


class UnavailableError(KeelError):
    """Kafka or Redis did not answer in time; retrying later may succeed."""


class WaitTimeoutError(KeelError, TimeoutError):
    """A wait ended before its answer came (a run's end, an orchestrator's reply); what
    was sent stands and the answer is still to come, so the same wait may be repeated."""


class WorkflowIdConflictError(CommandRejected):
    """A start whose workflow id already names a run of another workflow or input.

    The existing run is kept and nothing is recorded for the start; the fields name that
    run (docs/workflows.md, "Reusing a workflow id"); ``status`` is its ``WorkflowStatus``
    (a ``str``: this module imports nothing of the domain). ``differs`` says what differs:
    ``"workflow"`` (``requested`` names the workflow asked for) or ``"input"``.
    """

    def __init__(
        self,
        workflow_id: str,
        run_id: str,
        name: str,
        version: int,
        status: str,
        started_at_ms: int,
        differs: Literal["workflow", "input"],
        requested: str,
    ) -> None:
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.name = name
        self.version = version
        self.status = status
        self.started_at_ms = started_at_ms
        self.differs = differs
        self.requested = requested
        run = (
            f"workflow id '{workflow_id}' is taken by run {run_id} of workflow '{name}' "
            f"v{version} ({status}, started {self.started_at})"
        )
        if differs == "workflow":
            why = f"{run}, not of '{requested}'; start refused (another id starts a new run)"
        else:
            why = (
                f"{run} with a different input; start refused (the same input joins that "
                "run, another id starts a new one)"
            )
        super().__init__(why)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        fields = (self.workflow_id, self.run_id, self.name, self.version, self.status)
        return type(self), (*fields, self.started_at_ms, self.differs, self.requested)

    @property
    def started_at(self) -> str:
        """When the existing run started, ISO-8601 in UTC to the millisecond."""
        return iso_utc(self.started_at_ms)


def iso_utc(ms: int) -> str:
    """Epoch milliseconds as every message shows a time: ISO-8601 in UTC to the millisecond
    (``2026-12-03T12:13:20.000Z``)."""
    when = datetime.fromtimestamp(ms / 1000, UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_validation_error(exc: ValidationError) -> str:
    """One line naming each offending field: ``field 'a.b': Field required``.

    Sorted, so the message does not depend on the order a pydantic release reports in.
    """
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        where = f"field '{loc}'" if loc else "input"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(sorted(parts))
