"""What a schedule is, and when it fires (docs/schedules.md).

A :class:`ScheduleSpec` names its timing (a five-field ``cron`` expression read in
``timezone``, or an interval ``every_ms`` anchored at the Unix epoch), the workflow it
starts with which input, its :class:`Overlap` policy and its catch-up window. Fire
times are milliseconds since the epoch; a tick's run id is ``<name>:<tick, UTC ISO>``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import BaseModel, Field, field_validator, model_validator

from orchestrator.config.redaction import clip
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.limits import MAX_DURATION_MS

__all__ = [
    "DAY_MS",
    "MAX_CATCHUP_MS",
    "MAX_EVERY_MS",
    "MIN_CATCHUP_MS",
    "MIN_EVERY_MS",
    "Overlap",
    "ScheduleSpec",
    "check_schedule_name",
    "fire_times",
    "next_fire",
    "parse_every",
    "schedule_workflow_id",
    "tick_iso",
    "tick_run_id",
]

#: One day.
DAY_MS = 86_400_000
#: The shortest interval (``--every``): ticks are named to the second.
MIN_EVERY_MS = 1000
#: The longest: a tick waits on a durable timer, and no timer is longer (docs/limits.md).
MAX_EVERY_MS = MAX_DURATION_MS
#: The catch-up window's bounds: a tick the schedule reaches later than this is missed.
MIN_CATCHUP_MS = 1000
MAX_CATCHUP_MS = 366 * DAY_MS
DEFAULT_CATCHUP_MS = 60_000

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@=+-]{0,99}")
_EVERY_RE = re.compile(r"\s*(\d+)\s*(ms|s|m|h|d)\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": DAY_MS}
_MAX_EVERY_DAYS = MAX_EVERY_MS // DAY_MS
#: More digits than this are past ``MAX_EVERY_MS`` in any unit (and never parsed as a number).
_MAX_EVERY_DIGITS = len(str(MAX_EVERY_MS))


class Overlap(StrEnum):
    """What a tick does while the run of an earlier tick has not ended.

    ``skip``: it is recorded skipped; ``buffer_one``: it waits (one at most; a later
    one is skipped) and starts once that run has ended; ``allow_all``: it starts anyway.
    """

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW_ALL = "allow_all"


def check_schedule_name(name: object) -> str:
    """``name`` when it is a valid schedule name; else an ``InvalidInputError``."""
    if isinstance(name, str) and _NAME_RE.fullmatch(name):
        return name
    raise InvalidInputError(
        f"invalid schedule name {name!r}: use 1-100 characters, a letter or digit first, "
        "then letters, digits and . _ - @ = +"[:300]
    )


def schedule_workflow_id(name: str) -> str:
    """The workflow id of schedule ``name``'s run of ``keel.schedule``."""
    return f"schedule:{check_schedule_name(name)}"


def parse_every(text: str) -> int:
    """``2s``, ``500ms``, ``5m``, ``1h``, ``1d`` as milliseconds (whole seconds, >= 1 s)."""
    m = _EVERY_RE.fullmatch(text)
    if m is None:
        raise InvalidInputError(f"--every must look like 2s, 5m, 1h or 1d, got {text!r}"[:200])
    digits = m.group(1).lstrip("0") or "0"
    ms = int(digits) * _UNIT_MS[m.group(2)] if len(digits) <= _MAX_EVERY_DIGITS else None
    if ms is None or ms > MAX_EVERY_MS:
        raise InvalidInputError(f"--every must be at most {_MAX_EVERY_DAYS:,}d, got {clip(text)!r}")
    if ms < MIN_EVERY_MS or ms % 1000:
        raise InvalidInputError(f"--every must be whole seconds, at least 1s, got {text!r}")
    return ms


def tick_iso(tick_ms: int) -> str:
    """A tick time as UTC ISO-8601 to the second: ``2026-12-03T17:05:00Z``."""
    return datetime.fromtimestamp(tick_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tick_run_id(name: str, tick_ms: int) -> str:
    """The workflow id of the run schedule ``name`` starts for the tick at ``tick_ms``."""
    return f"{name}:{tick_iso(tick_ms)}"


class ScheduleSpec(BaseModel):
    """A schedule: when it fires, what it starts, and how it treats overlaps and downtime."""

    name: str
    workflow: str
    version: int | None = None
    input: Any = Field(default_factory=dict)
    cron: str | None = None
    every_ms: int | None = None
    timezone: str = "UTC"
    overlap: Overlap = Overlap.SKIP
    catchup_window_ms: int = DEFAULT_CATCHUP_MS

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_schedule_name(value)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @model_validator(mode="after")
    def _timing(self) -> ScheduleSpec:
        if (self.cron is None) == (self.every_ms is None):
            raise ValueError("give exactly one of cron and every")
        if self.cron is not None:
            if len(self.cron.split()) != 5 or not croniter.is_valid(self.cron):
                raise ValueError(
                    f"cron must be five fields (minute hour day month weekday), got {self.cron!r}"
                )
        elif self.every_ms is not None and (self.every_ms < MIN_EVERY_MS or self.every_ms % 1000):
            raise ValueError("every must be whole seconds, at least 1s")
        elif self.every_ms is not None and self.every_ms > MAX_EVERY_MS:
            raise ValueError(f"every must be at most {_MAX_EVERY_DAYS:,} days")
        if not MIN_CATCHUP_MS <= self.catchup_window_ms <= MAX_CATCHUP_MS:
            raise ValueError("the catch-up window must be between 1 second and 366 days")
        return self

    @property
    def timing(self) -> str:
        """The timing as a person reads it: ``cron '*/5 * * * *' (Europe/Paris)`` or
        ``every 2s``."""
        if self.cron is not None:
            return f"cron '{self.cron}' ({self.timezone})"
        assert self.every_ms is not None
        return f"every {self.every_ms // 1000}s"


def next_fire(spec: ScheduleSpec, after_ms: int) -> int:
    """The first fire time strictly after ``after_ms``."""
    if spec.every_ms is not None:
        return (after_ms // spec.every_ms + 1) * spec.every_ms
    assert spec.cron is not None
    start = datetime.fromtimestamp(after_ms / 1000, ZoneInfo(spec.timezone))
    nxt = croniter(spec.cron, start).get_next(datetime)
    return int(nxt.timestamp() * 1000)


def fire_times(spec: ScheduleSpec, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """The first ``limit`` fire times in ``(after_ms, until_ms]``, oldest first."""
    out: list[int] = []
    t = after_ms
    while len(out) < limit:
        t = next_fire(spec, t)
        if t > until_ms:
            break
        out.append(t)
    return out


def newest_fire_times(spec: ScheduleSpec, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """The last ``limit`` fire times in ``(after_ms, until_ms]``, oldest first."""
    out: list[int] = []
    if spec.every_ms is not None:
        t = until_ms // spec.every_ms * spec.every_ms
        while t > after_ms and len(out) < limit:
            out.append(t)
            t -= spec.every_ms
        return out[::-1]
    assert spec.cron is not None
    zone = ZoneInfo(spec.timezone)
    it = croniter(spec.cron, datetime.fromtimestamp((until_ms + 1) / 1000, zone))
    while len(out) < limit:
        t = int(it.get_prev(datetime).timestamp() * 1000)
        if t <= after_ms:
            break
        out.append(t)
    return out[::-1]


def count_fire_times(spec: ScheduleSpec, after_ms: int, until_ms: int, cap: int) -> int:
    """How many fire times lie in ``(after_ms, until_ms]`` (at most ``cap`` counted for a
    cron expression; exact for an interval)."""
    if until_ms <= after_ms:
        return 0
    if spec.every_ms is not None:
        return until_ms // spec.every_ms - after_ms // spec.every_ms
    return len(fire_times(spec, after_ms, until_ms, cap))


def spec_error(exc: Exception) -> InvalidInputError:
    """A pydantic error of a spec as one line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        parts = []
        for e in errors():
            where = ".".join(str(x) for x in e.get("loc", ()))
            msg = str(e.get("msg", "")).removeprefix("Value error, ")
            parts.append(f"{where}: {msg}" if where else msg)
        return InvalidInputError("invalid schedule: " + "; ".join(parts))
    return InvalidInputError(f"invalid schedule: {exc}")
