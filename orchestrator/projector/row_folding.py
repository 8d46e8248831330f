"""How the projector turns events into read-model rows: records decoded, each workflow's
events folded onto the state it caches (or, when they follow on from it without a gap, the
orchestrator's decided state taken as their fold), and the rows, history lines and
human-task inbox changes written in one write.

An event that cannot be decoded or folded is logged and skipped for its workflow, whose row
then says so. The write is guarded: a row whose sequence number moved under the projector is
read again (``SeqConflict``), a rebuilt read model empties the cache (``EpochChanged``), a
running rebuild is waited out (``RebuildRunning``).

:class:`RowFolding` is the base of :class:`~orchestrator.projector.projector.Projector`: its
topic loop, its in-process hand-off and ``keel projections rebuild`` all fold through it,
and it calls none of them back, using only the attributes it declares (the projector sets
them).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model.messages import Envelope
from orchestrator.domain.model.state import WorkflowState
from orchestrator.io.kafka.clients import ClientMessage, to_record
from orchestrator.io.ports import ReadModelStore, Record, Stopping
from orchestrator.io.redis.human_task_inbox import TaskKeys, TaskWrites, task_writes
from orchestrator.io.redis.read_model import EpochChanged, RebuildRunning, SeqConflict
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records import fast_json
from orchestrator.records.history_entries import history_entry

__all__ = ["CACHE_SIZE", "RowFolding", "Update"]

log = logging.getLogger("keel.projector")

CACHE_SIZE = 50_000

Update = tuple[WorkflowState, list[str], str | None]


class RowFolding:
    """Events folded into read-model rows and written, with the cache of each run's state."""

    # set by the projector (``Projector.__init__``)
    codec: Codec
    decider: Decider
    projection: ReadModelStore
    task_keys: TaskKeys
    _cache: OrderedDict[str, WorkflowState]
    _epoch: str | None
    _stop: threading.Event
    applied: int
    skipped: int
    last_skip: str | None
    folds_taken: int
    waiting_for_rebuild: bool

    def _decode(self, records: Iterable[Record | ClientMessage]) -> dict[str, list[Envelope[Any]]]:
        by_wf: dict[str, list[Envelope[Any]]] = {}
        for item in records:
            rec = item if isinstance(item, Record) else to_record(item)
            try:
                value = rec.value
                if value is None:
                    raise ValueError("the record has no value")
                env = self.codec.decode(value)
            except Exception as exc:
                self.skipped += 1
                self.last_skip = f"undecodable event at {rec.topic}[{rec.partition}]"
                log.error(
                    "undecodable event at %s[%d]@%d skipped: %s",
                    rec.topic,
                    rec.partition,
                    rec.offset,
                    exc,
                )
                continue
            by_wf.setdefault(env.workflow_id, []).append(env)
        return by_wf

    def _load_missing(self, by_wf: dict[str, list[Envelope[Any]]], assume_new: bool = True) -> None:
        """Cache the read model's state of the workflows the cache lacks.

        With a store that checks sequence numbers on write, a workflow whose first event
        here is seq 1 is taken as new without a read (the write refuses it if a row
        exists: :class:`SeqConflict`, and the batch is folded again after a read).
        """
        optimistic = assume_new  # the store checks each row's seq with the write
        missing = [
            wf
            for wf, events in by_wf.items()
            if wf not in self._cache and not (optimistic and events and events[0].seq == 1)
        ]
        if missing:
            self._cache.update(self.projection.load_states(missing))

    def _fold(
        self,
        by_wf: dict[str, list[Envelope[Any]]],
        assume_new: bool = True,
        decided: Mapping[str, WorkflowState] | None = None,
    ) -> tuple[dict[str, Update], dict[str, str], TaskWrites]:
        """New states and history lines per workflow, and the human-task inbox's changes;
        a workflow that fails is skipped."""
        self._load_missing(by_wf, assume_new)
        updates: dict[str, Update] = {}
        problems: dict[str, str] = {}
        folded: list[tuple[WorkflowState | None, WorkflowState, list[Envelope[Any]], list[str]]]
        folded = []
        for wf, events in by_wf.items():
            old = self._cache.get(wf)
            known = decided.get(wf) if decided else None
            state, lines, applied = self._fold_one(wf, old, events, problems, known)
            if state is None or not lines:
                continue
            updates[wf] = (state, lines, old.status if old else None)
            folded.append((old, state, applied, lines))
        tasks = task_writes(self.task_keys, folded)
        for old, state, _, _ in folded:
            if old is not None and old.activities and state.run_base_seq > old.seq:
                # continued as new here: a node of the old run is named by its activities
                tasks.earlier_activity_types[state.workflow_id] = {
                    a.activity_id: a.activity_type for a in old.activities.values()
                }
        return updates, problems, tasks

    def _fold_one(
        self,
        wf: str,
        old: WorkflowState | None,
        events: list[Envelope[Any]],
        problems: dict[str, str],
        known: WorkflowState | None = None,
    ) -> tuple[WorkflowState | None, list[str], list[Envelope[Any]]]:
        """One workflow's new state, history lines and events folded (those after ``old``).

        ``known``, the orchestrator's state after the last of ``events``, is taken as the
        fold when the events follow on from ``old`` without a gap (it is their fold).
        Otherwise they are folded with one scratch copy (``Decider.fold``: one clone per
        batch, not one per event); should an event fail, again one by one, so the events
        before it are kept and the failing one is named in ``problems``.
        """
        applied: list[Envelope[Any]] = []
        first = last = old.seq if old is not None else 0
        for env in events:
            if env.seq > last:
                applied.append(env)
                last = env.seq
        try:
            folded: WorkflowState | None = old
            if known is not None and applied and known.seq == last == first + len(applied):
                self.folds_taken += 1
                folded = known
            elif applied:
                folded = self.decider.fold(applied, old)
            return folded, [fast_json.dumps(history_entry(e)) for e in applied], applied
        except Exception:
            pass  # the event-by-event fold below names the event
        state = old
        lines: list[str] = []
        applied = []
        for env in events:
            if state is not None and env.seq <= state.seq:
                continue
            try:
                state = self.decider.evolve(state, env)
                lines.append(fast_json.dumps(history_entry(env)))
                applied.append(env)
            except Exception as exc:
                problems[wf] = f"event seq {env.seq} ({env.type}) skipped: {exc}"[:500]
                self.skipped += 1
                self.last_skip = f"{wf}: {problems[wf]}"
                log.error("cannot project %s: %s", wf, problems[wf])
                break
        return state, lines, applied

    def apply(self, records: Iterable[Record | ClientMessage], guarded: bool = True) -> int:
        """Fold a batch of event records into the read model; returns events applied.

        ``guarded``: wait out a running rebuild and follow its epoch (live projectors);
        a rebuild applies unguarded, under its own lock.
        """
        return self._apply_envelopes(self._decode(records), guarded)[0]

    def _apply_envelopes(
        self,
        by_wf: dict[str, list[Envelope[Any]]],
        guarded: bool,
        decided: Mapping[str, WorkflowState] | None = None,
    ) -> tuple[int, dict[str, str]]:
        """Fold and write decoded events; (events applied, workflows that could not be).

        ``decided``: runs' states after their last event here, as the orchestrator of
        this process decided them (``CommittedEvent.state``).
        """
        if not by_wf:
            return 0, {}
        assume_new = True
        while True:
            updates, problems, tasks = self._fold(by_wf, assume_new, decided)
            if not updates:
                break
            store = self.projection
            try:
                if not guarded:
                    store.write(updates, tasks)
                else:
                    expected = {wf: self._seq_of(wf) for wf in updates}
                    store.write_guarded(updates, self._epoch, tasks, expected=expected)
                break
            except SeqConflict as conflict:
                log.info("read-model rows changed under the projector: %s", conflict)
                for wf in conflict.workflow_ids:
                    self._cache.pop(wf, None)
                assume_new = False
            except EpochChanged as changed:
                log.info("the read model was rebuilt; reloading the projector's cache")
                self._cache.clear()
                self._epoch = changed.epoch
            except RebuildRunning:
                self._wait_for_rebuild()
        for wf, (state, _, _) in updates.items():
            self._cache[wf] = state
            self._cache.move_to_end(wf)
        for wf, reason in problems.items():
            if wf in updates or wf in self._cache:
                self.projection.mark_error(wf, reason)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        applied = sum(len(lines) for _, lines, _ in updates.values())
        self.applied += applied
        return applied, problems

    def _seq_of(self, wf: str) -> int | None:
        state = self._cache.get(wf)
        return None if state is None else state.seq

    def _wait_for_rebuild(self) -> None:
        log.info("a rebuild of the read model is running; the projector waits")
        self.waiting_for_rebuild = True
        try:
            while self.projection.rebuild_running():
                if self._stop.wait(0.5):
                    raise Stopping("stopped while waiting for a rebuild of the read model")
        finally:
            self.waiting_for_rebuild = False
