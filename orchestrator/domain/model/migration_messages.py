"""The payloads of recorded migrations (docs/versioning.md), part of the message catalogue.

Kept apart so :mod:`orchestrator.domain.model.messages` stays readable; it re-exports every
name here and lists them in ``PAYLOAD_TYPES``. Same rules: frozen dataclasses mirroring
the Avro records in ``avro/`` field for field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["MigrateWorkflow", "WorkflowMigrated"]


@dataclass(frozen=True, slots=True)
class MigrateWorkflow:
    """An operator moves one live run to another version of its workflow.

    ``from_version`` (0: any) and ``to_digest`` ("": any) are what the operator checked,
    e.g. with a dry run: the decider refuses the command when the run or the deployed
    target differs, so a migration never applies to something nobody looked at.
    ``actor`` and ``reason`` are recorded as given (who and why).
    """

    KIND: ClassVar[str] = "command"
    to_version: int
    actor: str
    reason: str
    from_version: int = 0
    to_digest: str = ""


@dataclass(frozen=True, slots=True)
class WorkflowMigrated:
    """The run continues on ``to_version``: its position moved from ``from_state`` to
    ``to_state`` (the migration's mapping) and ``data_json`` holds what the migration
    function replaced in the run's data (a JSON object; ``{}``: nothing).
    ``migration`` names the declared migration that ran."""

    KIND: ClassVar[str] = "event"
    from_version: int
    to_version: int
    from_digest: str
    to_digest: str
    from_state: str
    to_state: str
    migration: str
    data_json: str
    actor: str
    reason: str
