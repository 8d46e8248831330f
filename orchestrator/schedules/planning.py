"""One tick of a schedule: controls applied, due ticks fired, missed or skipped
(docs/schedules.md, "How it works, and what is guaranteed").

:func:`run_tick` is pure but for its two arguments that reach outside: whether the
previous run has ended (the read model) and starting a tick's run (the client). The
tick activity calls it with the worker's clock; its result is recorded in the
schedule's history, so a replay never calls it again.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.schedules.spec import (
    Overlap,
    ScheduleSpec,
    count_fire_times,
    fire_times,
    newest_fire_times,
    next_fire,
    tick_iso,
    tick_run_id,
)

__all__ = [
    "MAX_STARTS_PER_TICK",
    "PAUSED_WAKE_MS",
    "Carry",
    "ControlOp",
    "TickInput",
    "TickOutcome",
    "TickRecord",
    "TickResult",
    "buffer_poll_ms",
    "run_tick",
]

#: Due ticks one tick activity handles at most; the rest are handled at once after it.
MAX_STARTS_PER_TICK = 50
#: Missed ticks listed one by one in a tick's result; past it, one record counts them.
MISSED_LISTED = 100
_EARLIER = "started by an earlier attempt of this tick"
#: Ticks kept in a schedule's ``recent`` list.
RECENT = 20
#: How long a paused schedule sleeps before it looks again (a resume wakes it at once).
PAUSED_WAKE_MS = 24 * 3600 * 1000


class ControlOp(StrEnum):
    """An operator's change to a schedule, sent as its ``control`` signal."""

    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"


class TickOutcome(StrEnum):
    """What became of one tick."""

    STARTED = "started"  # its run was started
    JOINED = "joined"  # its run existed already (a retried tick): the same run
    BUFFERED = "buffered"  # waiting for the previous run to end (overlap buffer_one)
    SKIPPED_OVERLAP = "skipped_overlap"  # the previous run had not ended (skip, or buffer full)
    MISSED = "missed"  # reached later than the catch-up window
    CONFLICT = "conflict"  # its run id names a run of another workflow or input
    FAILED = "failed"  # its start was refused (an unknown workflow, an invalid input)


class TickRecord(BaseModel):
    """One tick's outcome: ``tick`` its time (UTC ISO), ``at_ms`` when it was handled."""

    tick: str
    outcome: TickOutcome
    at_ms: int
    workflow_id: str | None = None
    detail: str | None = None


class Carry(BaseModel):
    """A schedule's state between ticks (and across ``continue_as_new``)."""

    since_ms: int
    last_tick_ms: int
    paused: bool = False
    deleted: bool = False
    buffered_ms: int | None = None
    last_run: str | None = None
    started: int = 0
    skipped: int = 0
    recent: list[TickRecord] = Field(default_factory=list)


class TickInput(BaseModel):
    """What the tick activity is given: the spec, the state so far, the new controls and
    how many ``control`` signals of this run they account for."""

    spec: ScheduleSpec
    carry: Carry | None = None
    controls: list[dict[str, Any]] = Field(default_factory=list)
    signals_seen: int = 0


class TickResult(BaseModel):
    """What the tick activity records: the new state, this tick's records, when to wake."""

    carry: Carry
    handled: list[TickRecord] = Field(default_factory=list)
    now_ms: int
    wake_in_ms: int
    next_fire_ms: int | None = None
    signals_seen: int = 0


#: ``start(tick_ms, run_id)`` -> the outcome and a detail (a refusal's reason).
Starter = Callable[[int, str], tuple[TickOutcome, str | None]]


def buffer_poll_ms(spec: ScheduleSpec) -> int:
    """How often a schedule holding a buffered tick looks whether the previous run ended:
    a quarter of its interval (a minute for a cron), between 1 and 15 seconds."""
    period = spec.every_ms if spec.every_ms is not None else 60_000
    return min(max(period // 4, 1000), 15_000)


def run_tick(
    inp: TickInput,
    now_ms: int,
    previous_ended: Callable[[str], bool],
    start: Starter,
    exists: Callable[[str], bool] = lambda run_id: False,
) -> TickResult:
    """Apply ``inp.controls``, then handle every tick due by ``now_ms`` (docs/schedules.md).

    ``exists(run_id)`` tells whether a tick's run was started already: a tick past the
    catch-up window whose run an earlier attempt of this tick started is recorded
    ``joined``, not ``missed``."""
    spec = inp.spec
    carry = (
        inp.carry.model_copy(deep=True)
        if inp.carry is not None
        else Carry(since_ms=now_ms, last_tick_ms=now_ms)
    )
    for control in inp.controls:
        _apply(carry, control, now_ms)
    handled: list[TickRecord] = []

    def record(tick_ms: int, outcome: TickOutcome, wf: str | None, detail: str | None) -> None:
        handled.append(
            TickRecord(
                tick=tick_iso(tick_ms), outcome=outcome, at_ms=now_ms, workflow_id=wf, detail=detail
            )
        )

    def fire(tick_ms: int) -> bool:
        run_id = tick_run_id(spec.name, tick_ms)
        outcome, detail = start(tick_ms, run_id)
        record(tick_ms, outcome, run_id, detail)
        if outcome in (TickOutcome.STARTED, TickOutcome.JOINED):
            carry.started += 1
            carry.last_run = run_id
            return True
        carry.skipped += 1
        return False

    next_ms: int | None = None
    wake_ms = PAUSED_WAKE_MS
    if carry.deleted:
        wake_ms = 0
    elif carry.paused:
        carry.last_tick_ms = max(carry.last_tick_ms, now_ms)
    else:
        running = carry.last_run is not None and not previous_ended(carry.last_run)
        if carry.buffered_ms is not None and not running:
            running = fire(carry.buffered_ms)
            carry.buffered_ms = None
        cutoff = now_ms - spec.catchup_window_ms - 1  # a tick at or before it is missed
        if cutoff > carry.last_tick_ms:
            joined = _missed(spec, carry, cutoff, record, exists)
            if joined is not None:
                running = not previous_ended(joined)
        due = fire_times(spec, carry.last_tick_ms, now_ms, MAX_STARTS_PER_TICK)
        for tick_ms in due:
            if spec.overlap is Overlap.ALLOW_ALL or not running:
                running = fire(tick_ms) or running
            elif spec.overlap is Overlap.BUFFER_ONE and carry.buffered_ms is None:
                carry.buffered_ms = tick_ms
                record(tick_ms, TickOutcome.BUFFERED, None, "the previous run has not ended")
            else:
                carry.skipped += 1
                record(
                    tick_ms,
                    TickOutcome.SKIPPED_OVERLAP,
                    None,
                    f"the previous run {carry.last_run} has not ended",
                )
            carry.last_tick_ms = tick_ms
        next_ms = next_fire(spec, max(carry.last_tick_ms, now_ms))
        more_due = next_fire(spec, carry.last_tick_ms) <= now_ms
        wake_ms = 0 if more_due else next_ms - now_ms
        if carry.buffered_ms is not None:
            wake_ms = min(wake_ms, buffer_poll_ms(spec))
    carry.recent = (carry.recent + handled)[-RECENT:]
    return TickResult(
        carry=carry,
        handled=handled,
        now_ms=now_ms,
        wake_in_ms=max(0, wake_ms),
        next_fire_ms=next_ms,
        signals_seen=inp.signals_seen,
    )


def _apply(carry: Carry, control: dict[str, Any], now_ms: int) -> None:
    op = control.get("op")
    if op == ControlOp.PAUSE:
        carry.paused = True
    elif op == ControlOp.RESUME and carry.paused:
        carry.paused = False  # the ticks of the pause are never fired
        carry.last_tick_ms = max(carry.last_tick_ms, now_ms)
    elif op == ControlOp.DELETE:
        carry.deleted = True


def _missed(
    spec: ScheduleSpec,
    carry: Carry,
    cutoff: int,
    record: Callable[[int, TickOutcome, str | None, str | None], None],
    exists: Callable[[str], bool],
) -> str | None:
    """Ticks in ``(last_tick, cutoff]`` came too late: recorded missed, never fired, but
    those an earlier attempt of this tick started (a failed attempt's starts stand; they
    are among the newest :data:`MISSED_LISTED`), recorded joined. Returns the newest
    joined run's id, if any."""
    count = count_fire_times(spec, carry.last_tick_ms, cutoff, 1_000_000)
    if count == 0:
        return None
    why = f"reached later than the catch-up window ({spec.catchup_window_ms // 1000}s)"
    oldest = fire_times(spec, carry.last_tick_ms, cutoff, MISSED_LISTED)
    # An earlier attempt started ticks within its own window: the newest of these.
    newest = (
        oldest
        if count <= MISSED_LISTED
        else newest_fire_times(spec, carry.last_tick_ms, cutoff, MISSED_LISTED)
    )
    started = [t for t in newest if exists(tick_run_id(spec.name, t))]
    unstarted = count - len(started)
    if count <= MISSED_LISTED:
        for tick_ms in oldest:
            if tick_ms not in started:
                record(tick_ms, TickOutcome.MISSED, None, why)
            else:
                record(tick_ms, TickOutcome.JOINED, tick_run_id(spec.name, tick_ms), _EARLIER)
    else:
        record(oldest[0], TickOutcome.MISSED, None, f"{unstarted} ticks from this one on {why}")
        for tick_ms in started:
            record(tick_ms, TickOutcome.JOINED, tick_run_id(spec.name, tick_ms), _EARLIER)
    joined = tick_run_id(spec.name, started[-1]) if started else None
    if joined is not None:
        carry.started += len(started)
        carry.last_run = joined
    carry.skipped += unstarted
    carry.last_tick_ms = cutoff
    return joined
