"""Creating, listing, showing, pausing, resuming and deleting schedules
(``client.schedules``, ``keel schedules``; docs/schedules.md).

A schedule is the run ``schedule:<name>`` of the built-in ``keel.schedule``: creating
one is a start of that run (the same spec again joins it), pause, resume and delete are
its ``control`` signal, and what is shown comes from the read model (its ``describe``
query) with the next fire times computed from the spec here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from orchestrator.application.app import KeelApp
from orchestrator.domain.model.errors import (
    CommandRejected,
    InvalidInputError,
    NotFoundError,
    WorkflowIdConflictError,
)
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.schedules.definition import (
    CONTROL_SIGNAL,
    DESCRIBE_QUERY,
    SCHEDULE_WORKFLOW,
    install_definition,
)
from orchestrator.schedules.planning import ControlOp
from orchestrator.schedules.spec import (
    DAY_MS,
    DEFAULT_CATCHUP_MS,
    MAX_CATCHUP_MS,
    MAX_EVERY_MS,
    Overlap,
    ScheduleSpec,
    check_schedule_name,
    fire_times,
    parse_every,
    schedule_workflow_id,
    spec_error,
    tick_iso,
)

__all__ = ["ScheduleClient", "ScheduleInfo", "ScheduleState"]

_PREFIX = "schedule:"
#: Non-terminal rows read to list the schedules.
_LIST_LIMIT = 1_000_000


class ScheduleState:
    """What ``list`` and ``show`` say a schedule is doing."""

    ACTIVE = "active"
    PAUSED = "paused"
    DELETED = "deleted"
    NEEDS_ATTENTION = "needs_attention"


class _Client(Protocol):
    """The part of :class:`~orchestrator.client.client.KeelClient` schedules use."""

    app: KeelApp
    projection: Any

    def start(self, name: str, input: Any = ..., workflow_id: str | None = ...) -> Any: ...

    def signal(self, workflow_id: str, name: str, payload: Any) -> str: ...

    def query(self, workflow_id: str, name: str, args: Any = ...) -> Any: ...


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as ``list`` and ``show`` give it. ``next_fires`` are UTC ISO times
    (none while paused or deleted); ``recent`` the latest ticks' outcomes, oldest first."""

    name: str
    workflow_id: str
    state: str
    spec: dict[str, Any]
    timing: str
    next_fires: list[str]
    started: int = 0
    skipped: int = 0
    last_run: str | None = None
    buffered: str | None = None
    recent: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workflow_id": self.workflow_id,
            "state": self.state,
            "timing": self.timing,
            "workflow": self.spec["workflow"],
            "overlap": self.spec["overlap"],
            "catchup_window_s": self.spec["catchup_window_ms"] // 1000,
            "next_fires": self.next_fires,
            "started": self.started,
            "skipped": self.skipped,
            "last_run": self.last_run,
            "buffered": self.buffered,
            "spec": self.spec,
            "recent": self.recent,
        }


def build_spec(
    name: str,
    workflow: str,
    input: Any = None,
    *,
    cron: str | None = None,
    every: str | int | float | None = None,
    timezone: str = "UTC",
    overlap: Overlap | str = Overlap.SKIP,
    catchup_window_s: float = DEFAULT_CATCHUP_MS / 1000,
    version: int | None = None,
) -> ScheduleSpec:
    """A checked spec; ``every`` is ``"2s"``-style text or seconds."""
    check_schedule_name(name)
    every_ms: int | None = None
    if isinstance(every, str):
        every_ms = parse_every(every)
    elif every is not None:
        every_ms = _ms(every, MAX_EVERY_MS, "every")
    try:
        return ScheduleSpec(
            name=name,
            workflow=workflow,
            version=version,
            input={} if input is None else input,
            cron=cron,
            every_ms=every_ms,
            timezone=timezone,
            overlap=Overlap(overlap),
            catchup_window_ms=_ms(catchup_window_s, MAX_CATCHUP_MS, "the catch-up window"),
        )
    except ValidationError as exc:
        raise spec_error(exc) from None
    except ValueError as exc:  # an unknown overlap policy
        raise spec_error(exc) from None


def _ms(seconds: float, most_ms: int, what: str) -> int:
    """``seconds`` as milliseconds; refused past ``most_ms`` (or not finite) before
    ``round`` could overflow, so a huge duration is one line at create, not a failed run."""
    value = float(seconds)
    if not math.isfinite(value) or value * 1000 > most_ms:
        raise InvalidInputError(
            f"{what} must be at most {most_ms // DAY_MS:,} days, got {seconds!r}"
        )
    return round(value * 1000)


class ScheduleClient:
    """``client.schedules``: the schedules of one topic prefix."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        install_definition(client.app)

    def create(self, name: str, workflow: str, input: Any = None, **timing: Any) -> ScheduleInfo:
        """Create schedule ``name`` (see :func:`build_spec` for the options); creating it
        again with the same spec is a no-op; another spec is refused (``CommandRejected``)."""
        spec = build_spec(name, workflow, input, **timing)
        self.client.app.validate_start(spec.workflow, spec.version, spec.input)
        wf = schedule_workflow_id(name)
        try:
            self.client.start(SCHEDULE_WORKFLOW, {"spec": spec.model_dump(mode="json")}, wf)
        except WorkflowIdConflictError:
            raise CommandRejected(
                f"schedule '{name}' exists with another spec; delete it first "
                "(a deleted schedule's name is not reused)"
            ) from None
        info = self.show(name)
        if info.state == ScheduleState.DELETED:
            raise CommandRejected(
                f"schedule '{name}' was deleted; a deleted schedule's name is not reused"
            )
        return info

    def pause(self, name: str) -> None:
        """Stop firing until :meth:`resume` (ticks of the pause are never fired)."""
        self._control(name, ControlOp.PAUSE)

    def resume(self, name: str) -> None:
        self._control(name, ControlOp.RESUME)

    def delete(self, name: str) -> None:
        """End the schedule: its run completes in state ``deleted``; runs it started go on."""
        self._control(name, ControlOp.DELETE)

    def _control(self, name: str, op: ControlOp) -> None:
        wf = schedule_workflow_id(name)
        row = self.client.projection.get(wf)
        if row is None or row["name"] != SCHEDULE_WORKFLOW:
            raise NotFoundError(f"no schedule '{name}'; {op} refused")
        if WorkflowStatus(row["status"]).is_terminal:
            raise CommandRejected(f"schedule '{name}' is deleted; {op} refused")
        self.client.signal(wf, CONTROL_SIGNAL, {"op": str(op)})

    def show(self, name: str, fires: int = 5) -> ScheduleInfo:
        """Schedule ``name`` as the read model holds it, with its next ``fires`` times."""
        wf = schedule_workflow_id(name)
        row = self.client.projection.get(wf)
        if row is None or row["name"] != SCHEDULE_WORKFLOW:
            raise NotFoundError(f"no schedule '{name}'")
        return self._info(wf, row["status"], fires)

    def list(self, fires: int = 1, include_deleted: bool = False) -> list[ScheduleInfo]:
        """Every schedule that is not deleted (and the deleted ones too when asked)."""
        statuses = [s for s in WorkflowStatus if include_deleted or not s.is_terminal]
        found: set[str] = set()  # a run may move between two status sets while they are read
        for status in statuses:
            for row in self.client.projection.list(str(status), limit=_LIST_LIMIT):
                if row["name"] == SCHEDULE_WORKFLOW and row["workflow_id"].startswith(_PREFIX):
                    found.add(row["workflow_id"])
        out = []
        for wf in sorted(found):
            status = self.client.projection.status(wf)
            if status is not None and (include_deleted or not WorkflowStatus(status).is_terminal):
                out.append(self._info(wf, status, fires))
        return out

    def _info(self, wf: str, status: str, fires: int) -> ScheduleInfo:
        value = self.client.query(wf, DESCRIBE_QUERY).value
        spec = ScheduleSpec.model_validate(value["spec"])
        carry = value.get("carry") or {}
        if WorkflowStatus(status).is_terminal:
            state = ScheduleState.DELETED
        elif status == WorkflowStatus.NEEDS_ATTENTION:
            state = ScheduleState.NEEDS_ATTENTION
        elif carry.get("paused"):
            state = ScheduleState.PAUSED
        else:
            state = ScheduleState.ACTIVE
        next_fires: list[str] = []
        if state in (ScheduleState.ACTIVE, ScheduleState.NEEDS_ATTENTION):
            now = int(time.time() * 1000)
            after = max(carry.get("last_tick_ms", now), now)
            next_fires = [tick_iso(t) for t in fire_times(spec, after, 2**62, fires)]
        buffered = carry.get("buffered_ms")
        return ScheduleInfo(
            name=spec.name,
            workflow_id=wf,
            state=state,
            spec=spec.model_dump(mode="json"),
            timing=spec.timing,
            next_fires=next_fires,
            started=carry.get("started", 0),
            skipped=carry.get("skipped", 0),
            last_run=carry.get("last_run"),
            buffered=tick_iso(buffered) if buffered is not None else None,
            recent=list(carry.get("recent", [])),
        )
