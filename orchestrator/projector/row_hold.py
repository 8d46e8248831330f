"""Rows an in-process projector holds back: a run's events that change nothing a client
waits on, written with the run's next write instead of one Redis write each.

A remote step's run is four transactions; the two in the middle (an activity completed,
the next scheduled) leave its status as it was. ``wait`` is told of a change of status
(``row_watch.py``), so ``keel orchestrator``'s projector (child or thread) keeps such a
run's events, with the state after them, for up to ``Settings.projector_row_hold_s``
(1 s: longer than the gap between a remote run's transactions in a burst, so its middle
ones merge) and writes them with the run's next change of status, or when the hold
ends. Under load a remote run then costs the read model two writes (its start and its
end) instead of four (docs/performance.md, "Beside Restate"). A row's step-by-step
progress (``state``, the history) shows up to the hold late; its status never does.

Held events move the feed cursor's tip but are *held* there (``FeedCursor.hold``): no
offset committed passes them until they are written, and a projector that drops what it
holds (a restart, a reassignment) moves its tips back before them, so nothing is lost
that the topic will not bring again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    Envelope,
    StateEntered,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.io.handoff.committed_channel import CommittedEvent

__all__ = ["QUIET_EVENTS", "HeldRow", "RowHold", "fold_after", "hold_quiet", "quiet_state"]

#: The only events a row is held for; anything else (a start, an end, a signal, a human
#: task, a timer, a failure, a retry) is written at once, with what was held before it.
QUIET_EVENTS = frozenset({ActivityScheduled, ActivityCompleted, StateEntered})


@dataclass
class HeldRow:
    """One run's events held back (commit order), its state after them, since when."""

    events: list[CommittedEvent]
    state: WorkflowState
    since: float

    @property
    def envelopes(self) -> list[Envelope[Any]]:
        return [ev.envelope for ev in self.events]

    @property
    def offsets(self) -> list[tuple[int, int]]:
        return [(ev.partition, ev.offset) for ev in self.events]


class RowHold:
    """The rows held, by workflow id. Real time, as the hand-off's waits (``monotonic``).

    ``_order`` lists (since, workflow id) as rows are first held, so oldest first (a row
    held again keeps its ``since``): finding the rows due reads only its head.
    """

    def __init__(self, hold_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.hold_s = hold_s
        self.monotonic = monotonic
        self.rows: dict[str, HeldRow] = {}
        self._order: deque[tuple[float, str]] = deque()
        #: How many times a run's events were held (the projector's health).
        self.holds = 0

    def take(self, workflow_ids: Iterable[str]) -> dict[str, HeldRow]:
        """The rows of ``workflow_ids`` that are held, now no longer held."""
        rows = self.rows
        return {wf: rows.pop(wf) for wf in workflow_ids if wf in rows}

    def keep(self, wf: str, row: HeldRow, first: bool) -> None:
        """Hold ``row``; ``first``: not held before (else it keeps its place)."""
        self.rows[wf] = row
        if first:
            self._order.append((row.since, wf))
        self.holds += 1

    def clear(self) -> None:
        self.rows.clear()
        self._order.clear()

    def _drop_stale_head(self) -> None:
        """Drop the order's head entries of rows written since (or held anew later)."""
        order, rows = self._order, self.rows
        while order:
            since, wf = order[0]
            row = rows.get(wf)
            if row is not None and row.since == since:
                return
            order.popleft()

    def due(self) -> list[str]:
        """Rows held ``hold_s`` or longer, oldest first: to be written now."""
        self._drop_stale_head()
        until = self.monotonic() - self.hold_s
        rows, out = self.rows, []
        for since, wf in self._order:
            if since > until:
                break
            row = rows.get(wf)
            if row is not None and row.since == since:
                out.append(wf)
        return out

    def wait_s(self, wait_s: float) -> float:
        """``wait_s`` shortened to when the oldest held row must be written."""
        self._drop_stale_head()
        if not self._order:
            return wait_s
        since = self._order[0][0]
        return max(0.0, min(wait_s, since + self.hold_s - self.monotonic()))

    def may_hold(self, earlier: HeldRow | None) -> tuple[bool, float]:
        """Whether a row (held before as ``earlier``, or not) may be held now, and since
        when it would be."""
        now = self.monotonic()
        since = earlier.since if earlier is not None else now
        return self.hold_s > 0 and now - since < self.hold_s, since


def fold_after(
    decider: Decider, base: WorkflowState, events: list[Envelope[Any]]
) -> WorkflowState | None:
    """``base`` folded on with ``events`` past its seq; None when they do not follow on or
    cannot be folded (the write folds them again and names the event)."""
    todo = [env for env in events if env.seq > base.seq]
    if not todo or todo[0].seq != base.seq + 1:
        return None  # not next in line: the write (or the topic) sorts it out
    try:
        return decider.fold(todo, base)
    except Exception:
        return None


def quiet_state(
    decider: Decider,
    row: WorkflowState | None,
    earlier: HeldRow | None,
    events: list[CommittedEvent],
    decided: Mapping[str, WorkflowState],
) -> WorkflowState | None:
    """The run's state after ``events`` when they may be held: the row is written
    already, every event is one of ``QUIET_EVENTS`` with a known offset, and the status
    stays the row's. Else None (the write folds them, and names a problem)."""
    if row is None or not events:
        return None
    if any(type(ev.envelope.payload) not in QUIET_EVENTS or ev.offset < 0 for ev in events):
        return None
    base = earlier.state if earlier is not None else row
    last = events[-1].envelope
    known = decided.get(last.workflow_id)
    if known is not None and known.seq == last.seq:
        state: WorkflowState | None = known
    else:
        state = fold_after(decider, base, [ev.envelope for ev in events])
    if state is None or state.status != row.status or state.seq != last.seq:
        return None
    return state


def hold_quiet(
    hold: RowHold,
    decider: Decider,
    rows: Mapping[str, WorkflowState],
    by_wf: Mapping[str, list[CommittedEvent]],
    earlier: Mapping[str, HeldRow],
    envs: dict[str, list[Envelope[Any]]],
    decided: dict[str, WorkflowState],
) -> dict[str, HeldRow]:
    """Hold the runs whose newly handed events (``by_wf``) may wait, taking them out of
    ``envs`` (what is written now); returns them. ``earlier``: the rows held before,
    taken out of ``hold``, whose events lead their run's in ``envs``. The states folded
    here go into ``decided``, so the write does not fold them again. A row held before
    with no new event here (its hold ended) is written."""
    held: dict[str, HeldRow] = {}
    if hold.hold_s <= 0:
        return held
    for wf, evs in by_wf.items():
        if wf not in envs:
            continue  # not next in line: left to the topic
        before = earlier.get(wf)
        state = quiet_state(decider, rows.get(wf), before, evs, decided)
        if state is None:
            if before is not None and wf not in decided:  # fold on from what was held
                after = fold_after(decider, before.state, envs[wf])
                if after is not None:
                    decided[wf] = after
            continue
        may, since = hold.may_hold(before)
        if may:
            held[wf] = HeldRow([*(before.events if before else []), *evs], state, since)
            del envs[wf]
            hold.keep(wf, held[wf], first=before is None)
        else:
            decided[wf] = state
    for wf, written in earlier.items():  # its hold ended, with nothing new
        if wf in envs and wf not in by_wf:
            decided[wf] = written.state
    return held
