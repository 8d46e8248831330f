"""What one orchestrator process holds for the partitions it owns, with bounded memory.

Live runs are kept whole (the decider needs them). A finished run only refuses or
ignores later commands, so it is kept small: its full summary while it waits for the
next checkpoint and in a bounded LRU of recent ones (redelivered reports and duplicate
starts arrive soon after), and past that only its identity, enough for the decider to
refuse a second start or a late command. The event store stays the truth.

A run whose history cannot be rebuilt is **quarantined**: known, broken, and refusing
every command with the reason, so a repeated start never opens a second run at seq 1.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.model.errors import KeelError
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.engine.log_scan import TailRecords
from orchestrator.engine.snapshot_records import snapshot_state_json
from orchestrator.payload_schemas.codec import Codec

__all__ = [
    "QUARANTINE_FIELD",
    "DeferredTail",
    "FinishedRuns",
    "OrchestratorStats",
    "PartitionState",
    "TailRecords",
    "collector_paused",
    "quarantine_json",
    "quarantine_reason",
]

#: A snapshot whose state JSON holds this field records a quarantined run.
QUARANTINE_FIELD = "keel_quarantine"


def quarantine_json(reason: str) -> str:
    return json.dumps({QUARANTINE_FIELD: reason}, separators=(",", ":"))


def quarantine_reason(state_json: str) -> str | None:
    """The reason recorded by :func:`quarantine_json`, if ``state_json`` is one."""
    if QUARANTINE_FIELD not in state_json[:64]:
        return None
    try:
        value = json.loads(state_json).get(QUARANTINE_FIELD)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


@contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a rebuild; with ``freeze``, keep it off
    what the rebuild built.

    A rebuild allocates hundreds of thousands of objects that all stay alive (the
    records of the tail, then the states); the collector's passes over them free nothing
    and took a quarter of a cold rebuild (git show 6f66b40:docs/performance.md,
    "Cold rebuild"). Turning
    it back on is not enough: the first allocation after would start a pass over all of
    them (~0.3 s for 100k finished runs), and older generations would scan them again
    later. ``freeze`` moves them to the permanent generation (``gc.freeze``), which no
    pass scans; reference counting still frees them when the runs go. The cost: a
    reference cycle left as garbage meanwhile, by the rebuild or another thread, is never
    collected, so a rebuild freezes once and the 5 ms background folds do not.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if freeze:
                gc.freeze()
            gc.enable()


@dataclass(frozen=True, slots=True)
class _Identity:
    """An evicted finished run: what the decider reads of a finished state."""

    run_id: str
    name: str
    version: int
    digest: str
    seq: int
    status: WorkflowStatus
    started_at: int
    updated_at: int


class FinishedRuns:
    """Finished runs of one partition: recent summaries in an LRU, older ones as identities.

    A rebuild restores finished runs from their snapshot records' headers as identities;
    the most recent ones also keep the record's bytes (``_packed``), decoded into the
    summary when first asked for, so the LRU holds what it held before the restart.
    """

    def __init__(self, capacity: int, codec: Codec) -> None:
        self.capacity = capacity
        self.codec = codec
        self._recent: OrderedDict[str, WorkflowState] = OrderedDict()
        self._old: dict[str, _Identity] = {}
        #: Snapshot record bytes of recently restored runs (their identity is in _old).
        self._packed: OrderedDict[str, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._recent) + len(self._old)

    def __contains__(self, wf: object) -> bool:
        return wf in self._recent or wf in self._old

    @property
    def summaries_held(self) -> int:
        return len(self._recent)

    def add(self, wf: str, summary: WorkflowState) -> None:
        self._old.pop(wf, None)
        self._packed.pop(wf, None)
        self._recent[wf] = summary
        self._recent.move_to_end(wf)
        while len(self._recent) > self.capacity:
            old_wf, s = self._recent.popitem(last=False)
            self._old[sys.intern(old_wf)] = _Identity(
                s.run_id,
                sys.intern(s.name),
                s.version,
                sys.intern(s.digest),
                s.seq,
                WorkflowStatus(s.status),  # a shared enum member
                s.started_at,
                s.updated_at,
            )

    def restore(self, wf: str, fields: list[Any], record: bytes | None = None) -> None:
        """A finished run from its snapshot header's identity ``fields`` (in
        ``snapshot_records`` order) and, for the most recent ones, the record's bytes."""
        run_id, name, version, digest, seq, status, started_at, updated_at = fields
        self._recent.pop(wf, None)
        wf = sys.intern(wf)
        self._old[wf] = _Identity(
            str(run_id),
            sys.intern(str(name)),
            int(version),
            sys.intern(str(digest)),
            int(seq),
            WorkflowStatus(status),
            int(started_at),
            int(updated_at),
        )
        self._packed.pop(wf, None)
        if record is not None and self.capacity > 0:
            self._packed[wf] = record
            while len(self._packed) > self.capacity:
                self._packed.popitem(last=False)

    def discard(self, wf: str) -> None:
        """Forget ``wf`` (a new run under its id is live)."""
        self._recent.pop(wf, None)
        self._old.pop(wf, None)
        self._packed.pop(wf, None)

    def get(self, wf: str) -> WorkflowState | None:
        s = self._recent.get(wf)
        if s is not None:
            self._recent.move_to_end(wf)
            return s
        record = self._packed.pop(wf, None)
        if record is not None:
            try:
                s = WorkflowState.from_json(snapshot_state_json(self.codec, wf, record))
            except Exception:  # the identity below is all a finished run needs
                s = None
            if s is not None and s.is_terminal:
                self.add(wf, s)
                return s
        i = self._old.get(wf)
        if i is None:
            return None
        return WorkflowState(
            workflow_id=wf,
            run_id=i.run_id,
            name=i.name,
            version=i.version,
            digest=i.digest,
            input_json="",
            seq=i.seq,
            status=i.status,
            started_at=i.started_at,
            updated_at=i.updated_at,
        )


@dataclass(slots=True)
class DeferredTail:
    """A run a rebuild holds undecoded: its base (a state, an unparsed snapshot or none),
    its tail's records, the log offset of the first, and whether it ended."""

    base: WorkflowState | str | bytes | None
    records: TailRecords
    first: int
    finished: bool


@dataclass
class PartitionState:
    """One owned partition: live runs, finished runs, quarantined runs, checkpoint progress."""

    #: Decodes the snapshot records a rebuild keeps packed (the process's codec).
    codec: Codec
    finished_capacity: int = 1000
    live: dict[str, WorkflowState] = field(default_factory=dict)
    finished: FinishedRuns = field(init=False)
    #: Quarantined runs: workflow id -> why it cannot be rebuilt.
    quarantined: dict[str, str] = field(default_factory=dict)
    #: What the next checkpoint writes: workflow id -> state (a finished run: its summary).
    dirty: dict[str, WorkflowState] = field(default_factory=dict)
    #: Quarantines not yet in a checkpoint.
    dirty_quarantine: set[str] = field(default_factory=set)
    #: keel.events offset just past the last event known to be in the log.
    events_end: int = 0
    #: Offset of the last event this process committed here since it took the partition
    #: (-1: none yet); what the next one handed to a projector follows (``committed.py``).
    last_committed_event: int = -1
    events_since_checkpoint: int = 0
    #: Live runs restored from a snapshot and not used since: their state JSON (an old
    #: snapshot) or their snapshot record's bytes (``snapshot_records``), decoded and
    #: parsed on first use. A rebuild decodes only what it needs, and the text is a
    #: fraction of the memory of the state it holds.
    unparsed: dict[str, str | bytes] = field(default_factory=dict)
    #: Armed timers of the unparsed and deferred runs, read once when they were restored.
    unparsed_timers: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    #: Runs whose tail a rebuild kept undecoded (``tail_records``), folded on first use or
    #: by :meth:`fold_deferred`. A checkpoint marker stays before the earliest
    #: (:meth:`deferred_from`).
    deferred: dict[str, DeferredTail] = field(default_factory=dict)
    #: How many of the deferred runs have ended (they are not live).
    deferred_finished: int = 0
    #: How a deferred run is rebuilt from its base and its tail's records (set by the
    #: rebuild that defers one); a finished run comes back as its summary.
    fold_tail: Callable[[WorkflowState | None, TailRecords], WorkflowState] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.finished = FinishedRuns(self.finished_capacity, self.codec)

    def get(self, wf: str) -> WorkflowState | None:
        state = self.live.get(wf)
        if state is not None:
            return state
        if wf in self.unparsed:
            return self._parse(wf)
        if wf in self.deferred:
            return self._fold(wf)
        return self.dirty.get(wf) or self.finished.get(wf)

    def _parse(self, wf: str) -> WorkflowState:
        js = self.unparsed.pop(wf)
        self.unparsed_timers.pop(wf, None)
        state = self._from_snapshot(wf, js)
        self.live[wf] = state
        return state

    def _from_snapshot(self, wf: str, js: str | bytes) -> WorkflowState:
        try:
            if isinstance(js, bytes):
                js = snapshot_state_json(self.codec, wf, js)
            state = WorkflowState.from_json(js)
            if state.is_terminal or state.workflow_id != wf:
                raise ValueError(
                    f"the snapshot of a live run holds {state.status} {state.workflow_id!r}"
                )
        except Exception as exc:  # never treat a broken run as absent: quarantine it
            self.quarantine(wf, f"unreadable snapshot: {_reason(exc)}")
            raise KeelError(f"workflow '{wf}' is quarantined: unreadable snapshot") from exc
        return state

    def _fold(self, wf: str) -> WorkflowState:
        """A deferred run folded now: held (a finished one as its summary) and written by
        the next checkpoint."""
        tail = self._undefer(wf)
        assert tail is not None, f"workflow '{wf}' is not deferred"
        self.unparsed_timers.pop(wf, None)
        base = tail.base
        if isinstance(base, str | bytes):
            base = self._from_snapshot(wf, base)
        try:
            assert self.fold_tail is not None, "a run was deferred without a way to fold it"
            state = self.fold_tail(base, tail.records)
        except Exception as exc:  # what the rebuild would have quarantined, now
            self.quarantine(wf, f"cannot rebuild: {_reason(exc)}")
            raise KeelError(f"workflow '{wf}' is quarantined: cannot rebuild") from exc
        self.put(wf, state, summarized=True)
        return state

    def _undefer(self, wf: str) -> DeferredTail | None:
        tail = self.deferred.pop(wf, None)
        if tail is not None and tail.finished:
            self.deferred_finished -= 1
        return tail

    def defer(
        self, wf: str, records: TailRecords, first: int, timers: list[tuple[str, int]] | None
    ) -> bool:
        """Hold a run's tail undecoded (see ``deferred``): a live run with its armed
        ``timers``, a finished one (``timers`` None) until its summary is needed.

        False (nothing held) when the run's base is a finished run: the rebuild's own
        path handles that.
        """
        if wf in self.dirty or wf in self.finished:
            return False
        base: WorkflowState | str | bytes | None = self.live.pop(wf, None)
        if base is None:
            base = self.unparsed.pop(wf, None)
        self._undefer(wf)
        finished = timers is None
        self.deferred[wf] = DeferredTail(base, records, first, finished)
        self.deferred_finished += finished
        if timers:
            self.unparsed_timers[wf] = timers
        else:
            self.unparsed_timers.pop(wf, None)
        return True

    def deferred_from(self) -> int | None:
        """The log offset of the earliest deferred event, if any run is deferred."""
        if not self.deferred:
            return None
        return min(tail.first for tail in self.deferred.values())

    def fold_deferred(self, budget_s: float) -> int:
        """Fold deferred runs for about ``budget_s`` seconds; how many were folded.

        Runs that cannot be folded are quarantined here, as on first use.
        """
        deadline = time.monotonic() + budget_s
        done = 0
        with collector_paused():  # as for the rebuild itself
            while self.deferred:
                wf = next(iter(self.deferred))
                with contextlib.suppress(KeelError):
                    self._fold(wf)
                done += 1
                if not done % 16 and time.monotonic() >= deadline:
                    break
        return done

    def hold_unparsed(
        self, wf: str, state_json: str | bytes, timers: list[tuple[str, int]]
    ) -> None:
        """Keep a live run's snapshot undecoded until the run is used (see ``unparsed``)."""
        self.live.pop(wf, None)
        self.finished.discard(wf)
        self._undefer(wf)
        self.unparsed[wf] = state_json
        if timers:
            self.unparsed_timers[wf] = timers
        else:
            self.unparsed_timers.pop(wf, None)

    def timers(self) -> Iterator[tuple[str, str, int]]:
        """``(workflow, timer_id, fire_at)`` of every armed timer of the live runs."""
        for wf, state in self.live.items():
            for timer_id, fire_at in state.pending_timers():
                yield wf, timer_id, fire_at
        for wf, pending in self.unparsed_timers.items():
            for timer_id, fire_at in pending:
                yield wf, timer_id, fire_at

    def live_count(self) -> int:
        return len(self.live) + len(self.unparsed) + len(self.deferred) - self.deferred_finished

    def put(
        self, wf: str, state: WorkflowState, *, dirty: bool = True, summarized: bool = False
    ) -> None:
        """Hold ``state`` as the run's current state (a finished run: its summary, which
        ``summarized`` says it is already, as a rebuild's are)."""
        if wf in self.unparsed or wf in self.deferred:
            self.unparsed.pop(wf, None)
            self._undefer(wf)
            self.unparsed_timers.pop(wf, None)
        if state.is_terminal:
            self.live.pop(wf, None)
            summary = state if summarized else state.summary()
            if dirty:
                self.dirty[wf] = summary
            else:
                self.finished.add(wf, summary)
        else:
            self.live[wf] = state
            if dirty:
                self.dirty[wf] = state

    def checkpointed(self) -> None:
        """The dirty states are in a checkpoint: finished ones move to the bounded store."""
        for wf, state in self.dirty.items():
            if state.is_terminal:
                self.finished.add(wf, state)
        self.dirty.clear()
        self.dirty_quarantine.clear()
        self.events_since_checkpoint = 0

    def quarantine(self, wf: str, reason: str, *, dirty: bool = True) -> None:
        self.live.pop(wf, None)
        self.unparsed.pop(wf, None)
        self._undefer(wf)
        self.unparsed_timers.pop(wf, None)
        self.dirty.pop(wf, None)
        self.quarantined[wf] = reason
        if dirty:
            self.dirty_quarantine.add(wf)

    def _materialize(self) -> None:
        for wf in list(self.unparsed):
            with contextlib.suppress(KeelError):
                self._parse(wf)
        self.fold_deferred(float("inf"))

    def count(self) -> int:
        finished_dirty = (
            sum(1 for s in self.dirty.values() if s.is_terminal) + self.deferred_finished
        )
        return self.live_count() + finished_dirty + len(self.finished) + len(self.quarantined)

    @property
    def workflows(self) -> dict[str, WorkflowState]:
        """Every run held in full (live, awaiting checkpoint, recent finished); for tests."""
        self._materialize()
        out = dict(self.finished._recent)
        out.update(self.dirty)
        out.update(self.live)
        return out


@dataclass
class OrchestratorStats:
    commands: int = 0
    events: int = 0
    tasks: int = 0
    dead_letters: int = 0
    #: Commands refused (recorded in a live run's history, else only logged).
    refused: int = 0
    transactions: int = 0
    aborts: int = 0
    producer_resets: int = 0
    recovered_events: int = 0
    recovery_s: float = 0.0
    quarantined: int = 0
    #: Broker errors met by transactional calls (retried or not).
    broker_errors: int = 0
    last_commit_at: float = 0.0
    last_broker_error: str = ""
    #: Per-hop timings, cumulative (``keel bench`` takes differences between phases).
    commit_ms_total: float = 0.0
    decide_ms_total: float = 0.0
    intake_lag_ms_total: float = 0.0
    intake_lag_n: int = 0
    local_activities: int = 0
    local_overruns: int = 0


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500] or type(exc).__name__
