"""Where a projector stands in each partition of ``keel.events``, and which partitions it
takes from the orchestrator's hand-off instead of the topic.

A projector inside ``keel orchestrator`` (thread or child) is handed each committed
transaction (``committed.py``, ``committed_pipe.py``). Each event names the record it
follows on its partition (``CommittedEvent.follows``): the orchestrator's previous event
there, with only transaction markers and aborted records between the two. So per
partition the cursor keeps a *tip*: every record at or below it is folded (or was
skipped on purpose). A handed event that follows the tip moves it on; the partition is
then paused on the topic, and its offsets are committed from the tip. The topic, the
source of truth, is read again from tip + 1 when:

- a handed event does not follow on (a dropped hand-off, the first transaction after the
  orchestrator took the partition) or its run could not be folded in order;
- the projector restarts its loop or the partition is revoked;
- when the hand-off has brought nothing of a paused partition for ``RECHECK_S`` (it may
  have gone silent: the orchestrator gave the partition up, or a tail was dropped).

Events folded in-process past a gap are remembered by offset (``folded_ahead``) so the
topic's copies are skipped undecoded. Measured in git show 6f66b40:docs/performance.md,
"The topic only for gaps".

A handed event the projector holds back (``row_hold.py``: a run's row not written yet)
moves the tip like a folded one, but is *held*: no offset committed passes it until it is
``released``, and ``drop_held`` moves the tip back before it (the topic brings it again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from orchestrator.io.ports import EventFeed, Record

__all__ = ["COMMIT_EVERY_S", "MAX_FOLDED_AHEAD", "RECHECK_S", "FeedCursor", "Handed"]

log = logging.getLogger("keel.projector")

#: How long a paused partition may go without a handed event before the topic is read
#: past its tip anyway.
RECHECK_S = 1.0
#: How often offsets taken from the hand-off are committed (at least once: a restart
#: reads again from the last commit and skips by sequence number).
COMMIT_EVERY_S = 0.5
#: Offsets folded in-process past a gap that the consumer has not reached yet, per
#: partition, kept at most (past it they are forgotten, and those records are decoded
#: and skipped by seq).
MAX_FOLDED_AHEAD = 100_000

#: One handed event: partition, offset, the offset it follows, and whether it is in the
#: read model now (folded, or already there).
Handed = tuple[int, int, int, bool]


class FeedCursor:
    """Per-partition tips, the paused partitions, and offsets folded ahead of the topic."""

    def __init__(
        self,
        feed: EventFeed,
        *,
        clock: Callable[[], float] = time.monotonic,
        recheck_s: float = RECHECK_S,
        commit_every_s: float = COMMIT_EVERY_S,
    ) -> None:
        self.feed = feed
        self.clock = clock
        self.recheck_s = recheck_s
        self.commit_every_s = commit_every_s
        #: Per partition: the offset up to which every record is folded or skipped.
        self.tips: dict[int, int] = {}
        #: Partitions not fetched from the topic: their hand-off follows on.
        self.paused: set[int] = set()
        #: Per partition: offsets folded in-process past the tip.
        self.folded_ahead: dict[int, set[int]] = {}
        #: Per partition: handed offsets past which nothing is committed yet (held rows).
        self.held: dict[int, set[int]] = {}
        self._uncommitted: set[int] = set()
        #: Per paused partition: when the hand-off last moved its tip.
        self._moved_at: dict[int, float] = {}
        self._committed_at = clock()
        #: Counters for the projector's health.
        self.pauses = 0
        self.gaps = 0
        self.rechecks = 0

    def health(self) -> dict[str, Any]:
        return {
            "paused_partitions": sorted(self.paused),
            "handoff_pauses": self.pauses,
            "handoff_gaps": self.gaps,
            "handoff_rechecks": self.rechecks,
        }

    # ------------------------------------------------------------------ the topic
    def unread(self, records: list[Record]) -> list[Record]:
        """``records`` less those already folded in-process (not decoded again)."""
        tips, ahead = self.tips, self.folded_ahead
        return [
            rec
            for rec in records
            if rec.offset > tips.get(rec.partition, -1)
            and rec.offset not in ahead.get(rec.partition, ())
        ]

    def read(self, records: list[Record]) -> dict[int, int]:
        """``records`` are in the read model: the tips follow them. The offsets to commit:
        theirs, and (a commit being made anyway) those taken from the hand-off."""
        tips = self.tips
        for rec in records:
            if rec.offset > tips.get(rec.partition, -1):
                tips[rec.partition] = rec.offset
        seen = {rec.partition for rec in records}
        for p in seen:
            done = self.folded_ahead.get(p)
            if done:  # what the consumer passed can never come again
                kept = {o for o in done if o > tips[p]}
                if kept:
                    self.folded_ahead[p] = kept
                else:
                    del self.folded_ahead[p]
        offsets = {p: self._commit_point(p) for p in seen}
        offsets.update(self.due_commits(force=bool(self._uncommitted)))
        return offsets

    def _commit_point(self, p: int) -> int:
        """The offset to commit on ``p``: past the tip, but never past a held record."""
        held = self.held.get(p)
        return min(self.tips[p] + 1, min(held)) if held else self.tips[p] + 1

    # ------------------------------------------------------------------ the hand-off
    def handed(self, events: Iterable[Handed]) -> None:
        """Handed events of owned partitions, in commit order, after the read model has
        them: tips move on, partitions that follow on are paused, gaps resumed."""
        tips = self.tips
        broken: set[int] = set()
        moved: set[int] = set()
        for p, offset, follows, folded in events:
            tip = tips.get(p)
            if tip is not None and offset <= tip:
                continue  # read from the topic already
            if tip is not None and folded and follows == tip >= 0 and p not in broken:
                tips[p] = offset
                self._uncommitted.add(p)
                moved.add(p)
                continue
            if folded:  # past a gap, or not read from the topic yet: skip it there
                ahead = self.folded_ahead.setdefault(p, set())
                if len(ahead) >= MAX_FOLDED_AHEAD:
                    ahead.clear()
                ahead.add(offset)
            if tip is not None:
                broken.add(p)
        if broken:
            self.gaps += len(broken)
            self.to_topic(broken)
        now = self.clock()
        for p in moved - broken:
            self._moved_at[p] = now
        fresh = sorted(p for p in moved if p not in self.paused and p not in broken)
        if fresh:
            self.feed.pause(fresh)
            self.paused.update(fresh)
            self.pauses += len(fresh)

    def to_topic(self, partitions: Iterable[int]) -> None:
        """Read these partitions from the topic again, from their tips on."""
        back = sorted(set(partitions) & self.paused)
        if not back:
            return
        self.paused.difference_update(back)
        for p in back:
            self._moved_at.pop(p, None)
        self.feed.resume(back)
        for p in back:
            self._rewind_past_tip(p)

    def _rewind_past_tip(self, p: int) -> None:
        try:
            self.feed.rewind(p, self.tips[p] + 1)
        except Exception as exc:  # no longer assigned: its new owner reads it
            log.info("not rewinding partition %d: %s", p, exc)

    def tick(self) -> dict[int, int]:
        """Between polls with nothing from the topic: :meth:`recheck`, then the offsets
        taken from the hand-off that are due for a commit."""
        self.recheck()
        return self.due_commits()

    def recheck(self) -> None:
        """Paused partitions the hand-off left alone for ``recheck_s`` go back to the topic."""
        if self.paused:
            since = self.clock() - self.recheck_s
            quiet = [p for p in self.paused if self._moved_at.get(p, 0.0) <= since]
            if quiet:
                self.rechecks += len(quiet)
                self.to_topic(quiet)

    def due_commits(self, force: bool = False) -> dict[int, int]:
        """Offsets taken from the hand-off, once ``commit_every_s`` has passed."""
        if not self._uncommitted:
            return {}
        now = self.clock()
        if not force and now - self._committed_at < self.commit_every_s:
            return {}
        self._committed_at = now
        offsets = {p: self._commit_point(p) for p in self._uncommitted if p in self.tips}
        self._uncommitted.clear()  # a partition capped by a held record: again on release
        return offsets

    # ------------------------------------------------------------------ held back
    def hold(self, offsets: Iterable[tuple[int, int]]) -> None:
        """Handed events (partition, offset) that are not in the read model yet."""
        for p, offset in offsets:
            self.held.setdefault(p, set()).add(offset)

    def release(self, offsets: Iterable[tuple[int, int]]) -> None:
        """Held events now in the read model: commits may pass them."""
        for p, offset in offsets:
            held = self.held.get(p)
            if held is not None:
                held.discard(offset)
                if not held:
                    del self.held[p]
                self._uncommitted.add(p)

    def drop_held(self) -> None:
        """What was held is forgotten: each tip goes back before its partition's first
        held record and the topic is read from there (what was written since is skipped
        by sequence number)."""
        back = []
        for p, held in self.held.items():
            ahead = self.folded_ahead.get(p)
            if ahead:  # handed before the topic reached them: it must not skip them
                ahead.difference_update(held)
            if p in self.tips:
                self.tips[p] = min(self.tips[p], min(held) - 1)
                back.append(p)
        self.held.clear()
        for p in back:
            if p in self.paused:
                self.to_topic([p])
            else:
                self._rewind_past_tip(p)

    # ------------------------------------------------------------------ ownership
    def forget(self, partitions: Iterable[int]) -> None:
        """Assigned anew or revoked: nothing is known of these partitions."""
        again = []
        for p in partitions:
            self.tips.pop(p, None)
            self.held.pop(p, None)
            self.folded_ahead.pop(p, None)
            self._uncommitted.discard(p)
            self._moved_at.pop(p, None)
            if p in self.paused:
                self.paused.discard(p)
                again.append(p)
        if again:  # a paused partition stays paused through a reassignment
            self.feed.resume(again)

    def clear(self) -> None:
        """The consumer is replaced: nothing is known of any partition."""
        self.forget({*self.tips, *self.folded_ahead, *self.paused, *self.held})

    def restart(self) -> None:
        """The projector's loop starts again: what it took in-process may be lost."""
        self.drop_held()
        self.to_topic(set(self.paused))
