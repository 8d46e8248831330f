"""Rebuilding owned partitions from checkpoints and the log, and writing checkpoints.

On assignment a partition is rebuilt from its newest checkpoint in ``keel.snapshots``
plus the tail of ``keel.events``. A checkpoint writes the state of every workflow
changed since the previous one and a marker holding the events offset they cover, so
recovery time stays bounded as history grows. A state too large for one record is
written in chunks (keys ``_chunk/<id>/<i>``, which no workflow id can take) under a head
record naming their count.

A run whose history cannot be rebuilt (an event the current definition cannot fold, an
undecodable record, a broken snapshot) is quarantined, never dropped: dropping it would let a
repeated start open a second run at seq 1 in the same stream. A live run of a version this
process does not have is held as a stand-in instead (its commands are parked,
orchestrator/domain/lifecycle/missing_versions.py); a checkpoint never writes a stand-in and
keeps its partition's marker before the stand-in's first unfolded event, so a process with the
version folds the whole history.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from orchestrator.domain.lifecycle.decider import SUMMARY_EVENTS
from orchestrator.domain.lifecycle.missing_versions import stand_in
from orchestrator.domain.model.messages import TERMINAL_EVENTS, WorkflowSnapshot
from orchestrator.domain.model.state import TERMINAL_STATUSES, WorkflowState
from orchestrator.engine.log_scan import group_runs, header_value, scan
from orchestrator.engine.owned import (
    PartitionState,
    TailRecords,
    collector_paused,
    quarantine_json,
    quarantine_reason,
)
from orchestrator.engine.runtime_context import RuntimeContext
from orchestrator.engine.snapshot_records import (
    SNAPSHOT_HEADER,
    SnapshotKind,
    parse_snapshot_meta,
    snapshot_headers,
)
from orchestrator.engine.tail_records import ARMED_HEADER, parse_armed
from orchestrator.payload_schemas.codec import DecodeError
from orchestrator.records import fast_json
from orchestrator.records.envelopes import check_record_size, snapshot_envelope

__all__ = [
    "CHECKPOINT_KEY",
    "CHUNK_CHARS",
    "CHUNK_PREFIX",
    "SUMMARY_TYPES",
    "TERMINAL_TYPES",
    "TYPE_HEADER",
    "Recovery",
]

log = logging.getLogger("keel.orchestrator")

#: Key of the per-partition checkpoint marker in keel.snapshots.
CHECKPOINT_KEY = "__keel_checkpoint__"
#: Keys of the chunks of a large snapshot start with this (no workflow id can).
CHUNK_PREFIX = "_chunk/"
#: A snapshot's state JSON longer than this is written in chunks of this many characters.
CHUNK_CHARS = 400_000
_CHUNKS_FIELD = "keel_chunks"
#: Kafka header naming each event's type, so a rebuild can pick what to decode.
TYPE_HEADER = "keel.type"
TERMINAL_TYPES = frozenset(cls.__name__ for cls in TERMINAL_EVENTS)
#: The events ``Decider.summarize`` needs to rebuild a finished run.
SUMMARY_TYPES = frozenset(cls.__name__ for cls in SUMMARY_EVENTS)


def _one_line(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Recovery:
    """Rebuilds partitions (with quarantine) and writes checkpoints, through the ports."""

    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self.last_checkpoint = ctx.clock.monotonic()
        #: Per partition, the log offset a checkpoint marker may not pass (stand-ins).
        self.held: dict[int, int] = {}

    # ------------------------------------------------------------------ rebuilding
    def recover(self, owned: list[int], *, use_snapshots: bool = True) -> dict[int, PartitionState]:
        """Rebuild partitions from the newest checkpoint and the events after it.

        ``use_snapshots=False`` folds every run from its events alone, ignoring
        ``keel.snapshots`` (the same result, slower: ``keel bench``'s cold rebuild).
        """
        with collector_paused(freeze=True):
            return self._recover(owned, use_snapshots)

    def _recover(self, owned: list[int], use_snapshots: bool) -> dict[int, PartitionState]:
        ctx = self.ctx
        stop = ctx.stopping
        result = {p: ctx.new_partition() for p in owned}
        starts: dict[int, int] = dict.fromkeys(owned, 0)
        heads: dict[int, dict[str, tuple[int, int, int]]] = {p: {} for p in owned}
        chunks: dict[int, dict[str, tuple[int, int, str]]] = {p: {} for p in owned}
        # Records with a snapshot header are restored after the read, all of a partition
        # at once (the newest per key wins, in the order they were last written).
        staged: dict[int, dict[bytes, tuple[bytes, bytes]]] = {p: {} for p in owned}
        topic = ctx.topics.snapshots
        snapshots = scan(ctx.log, topic, dict.fromkeys(owned, 0), stop) if use_snapshots else ()
        for p, offset, key, value, hs in snapshots:
            if value is None:
                continue  # a tombstone
            if key:
                st = staged[p]
                st.pop(key, None)  # newer than a staged record of the same key
                if hs:
                    raw = header_value(hs, SNAPSHOT_HEADER)
                    if raw is not None:
                        st[key] = (raw, value)
                        continue
            self._load_record(result[p], heads[p], chunks[p], starts, topic, p, offset, value)
        for p in owned:
            self._restore(result[p], heads[p], chunks[p], starts, p, staged[p])
        for p in owned:
            self._assemble_chunks(result[p], heads[p], chunks[p])
            result[p].events_end = starts[p]
        # The events after the checkpoint, grouped by run as they are read.
        tail = group_runs(ctx.log, ctx.topics.events, starts, stop, TYPE_HEADER)
        firsts, lasts = tail.firsts, tail.lasts
        for p, by_key in tail.records.items():
            ps = result[p]
            self.held.pop(p, None)
            ps.events_end = tail.ends[p]
            deferrable = self._deferrable(by_key, lasts[p])
            if deferrable:
                ps.fold_tail = self._rebuild
            for key, records in by_key.items():
                wf = key.decode("utf-8", "replace")
                if wf in ps.quarantined:
                    continue
                if key in deferrable and ps.defer(wf, records, firsts[p][key], deferrable[key]):
                    continue
                base = None
                try:
                    base = ps.get(wf)
                    state = self._rebuild(base, records)
                    if state is not base:  # a finished one is its summary already
                        ps.put(wf, state, summarized=True)
                except Exception as exc:  # any history this code cannot fold
                    held = self._stand_in(base, records, firsts[p][key])
                    if held is None:
                        self._quarantine(ps, p, wf, f"cannot rebuild: {_one_line(exc)}")
                        continue
                    log.warning("workflow %s runs a version this process lacks: held", wf)
                    ps.put(wf, held)
                    first = firsts[p][key]
                    self.held[p] = min(self.held.get(p, first), first)
        ctx.stats.recovered_events += tail.count
        return result

    def _deferrable(
        self, by_key: dict[bytes, TailRecords], lasts: dict[bytes, Any]
    ) -> dict[bytes, list[tuple[str, int]] | None]:
        """The runs of a partition's tail whose rebuild can wait: a live one's armed
        timers, None for one that ended.

        A run qualifies when its last event carries the armed header (``tail_records``)
        of a definition this process has; every header of the partition is parsed at
        once. Runs without the header or of a missing version are rebuilt now.
        """
        found: list[tuple[bytes, bytes, bool]] = []
        for key, records in by_key.items():
            hs = lasts[key]
            raw = header_value(hs, ARMED_HEADER) if hs else None
            if raw is not None:
                found.append((key, raw, records[-1][0] in TERMINAL_TYPES))
        if not found:
            return {}
        # Many runs share a header (every finished run of a definition, live ones with no
        # timer): each distinct one is parsed once, all of them in one JSON call.
        distinct = list(dict.fromkeys(raw for _, raw, _ in found))
        try:
            metas: list[Any] = json.loads(b"[" + b",".join(distinct) + b"]")
            if len(metas) != len(distinct):
                raise ValueError("a header is not one JSON value")
        except ValueError:
            metas = [None] * len(distinct)
        definitions = self.ctx.decider.definitions
        usable: dict[bytes, list[tuple[str, int]]] = {}
        for raw, meta in zip(distinct, metas, strict=True):
            try:
                name, version, timers = parse_armed(json.loads(raw) if meta is None else meta)
            except ValueError:
                continue
            if (name, version) in definitions:
                usable[raw] = timers
        out: dict[bytes, list[tuple[str, int]] | None] = {}
        for key, raw, ended in found:
            armed = usable.get(raw)
            if armed is not None:
                out[key] = None if ended else armed
        return out

    def _stand_in(
        self,
        base: WorkflowState | None,
        records: TailRecords,
        first_offset: int,
    ) -> WorkflowState | None:
        """The stand-in of a live run whose (name, version) this process lacks, else None."""
        try:
            events = [self.ctx.codec.decode(v) for _, v in records if v is not None]
            state = stand_in(base, events, first_offset)
        except Exception:
            return None
        if (state.name, state.version) in self.ctx.decider.definitions:
            return None  # the definition is here: the history itself is broken
        return state

    def _load_record(
        self,
        ps: PartitionState,
        heads: dict[str, tuple[int, int, int]],
        chunks: dict[str, tuple[int, int, str]],
        starts: dict[int, int],
        topic: str,
        p: int,
        offset: int,
        value: bytes,
    ) -> None:
        """One snapshot record decoded whole: a marker, a chunk, or a run's state."""
        try:
            env = self.ctx.codec.decode(value)
            snap = env.payload
            if not isinstance(snap, WorkflowSnapshot):
                raise DecodeError(f"{env.type} is not a snapshot")
        except (DecodeError, ValueError) as exc:
            log.error("unreadable snapshot at %s[%d]@%d: %s", topic, p, offset, exc)
            return
        wf = env.workflow_id
        if wf == CHECKPOINT_KEY:
            starts[p] = snap.events_offset
        elif wf.startswith(CHUNK_PREFIX):
            chunks[wf] = (env.seq, snap.events_offset, snap.state_json)
        else:
            self._load_snapshot(ps, heads, wf, env.seq, snap)

    def _restore(
        self,
        ps: PartitionState,
        heads: dict[str, tuple[int, int, int]],
        chunks: dict[str, tuple[int, int, str]],
        starts: dict[int, int],
        p: int,
        staged: dict[bytes, tuple[bytes, bytes]],
    ) -> None:
        """Runs restored from their snapshot headers alone (``snapshot_records``); a
        record whose header this code cannot read is decoded whole instead."""
        if not staged:
            return
        try:  # one parse for the partition: far cheaper than one per record
            metas: list[Any] = json.loads(b"[" + b",".join(r for r, _ in staged.values()) + b"]")
            if len(metas) != len(staged):
                raise ValueError("a header is not one JSON value")
        except ValueError:
            metas = [None] * len(staged)
        for (key, (raw, value)), meta in zip(staged.items(), metas, strict=True):
            try:
                wf = key.decode()
                kind, fields = parse_snapshot_meta(json.loads(raw) if meta is None else meta)
            except ValueError:  # UnicodeDecodeError, bad JSON, an unknown kind
                topic = self.ctx.topics.snapshots
                self._load_record(ps, heads, chunks, starts, topic, p, -1, value)
                continue
            if ps.quarantined:
                ps.quarantined.pop(wf, None)
            if heads:
                heads.pop(wf, None)
            if kind is SnapshotKind.LIVE:
                ps.hold_unparsed(wf, value, fields)
            else:
                ps.live.pop(wf, None)
                ps.unparsed.pop(wf, None)
                ps.unparsed_timers.pop(wf, None)
                ps.finished.restore(wf, fields, value)

    def _quarantine(self, ps: PartitionState, p: int, wf: str, reason: str) -> None:
        log.error("quarantined workflow %s on partition %d: %s", wf, p, reason)
        self.ctx.stats.quarantined += 1
        ps.quarantine(wf, reason)

    def _load_snapshot(
        self,
        ps: PartitionState,
        heads: dict[str, tuple[int, int, int]],
        wf: str,
        seq: int,
        snap: WorkflowSnapshot,
    ) -> None:
        js = snap.state_json
        reason = quarantine_reason(js)
        if reason is not None:
            ps.quarantine(wf, reason, dirty=False)
            return
        ps.quarantined.pop(wf, None)
        heads.pop(wf, None)
        if js.startswith('{"' + _CHUNKS_FIELD):
            heads[wf] = (seq, snap.events_offset, int(json.loads(js)[_CHUNKS_FIELD]))
            return
        try:
            self._hold(ps, wf, js)
        except Exception as exc:
            ps.live.pop(wf, None)
            ps.unparsed.pop(wf, None)
            self._quarantine(ps, -1, wf, f"unreadable snapshot: {_one_line(exc)}")

    @staticmethod
    def _hold(ps: PartitionState, wf: str, js: str) -> None:
        """A live run's snapshot is kept as text (parsed when used), a finished one folded.

        Only the JSON is read here, for the status and the armed timers: building the
        state costs ten times more, and most live runs wait untouched for a long time.
        """
        d = json.loads(js)
        if not isinstance(d, dict):
            raise ValueError("a workflow state must be a JSON object")
        if d["status"] in TERMINAL_STATUSES:
            ps.put(wf, WorkflowState.from_dict(d), dirty=False)
            return
        timers = sorted(
            ((str(k), int(v[0])) for k, v in d["timers"].items()), key=lambda x: (x[1], x[0])
        )
        ps.hold_unparsed(wf, js, timers)

    def _assemble_chunks(
        self,
        ps: PartitionState,
        heads: dict[str, tuple[int, int, int]],
        chunks: dict[str, tuple[int, int, str]],
    ) -> None:
        for wf, (seq, events_offset, n) in heads.items():
            parts = []
            for i in range(n):
                found = chunks.get(f"{CHUNK_PREFIX}{wf}/{i}")
                if found is None or found[:2] != (seq, events_offset):
                    self._quarantine(ps, -1, wf, f"snapshot chunk {i} of {n} is missing")
                    break
                parts.append(found[2])
            else:
                try:
                    ps.put(wf, WorkflowState.from_json("".join(parts)), dirty=False)
                except Exception as exc:
                    self._quarantine(ps, -1, wf, f"unreadable snapshot: {_one_line(exc)}")

    def _rebuild(self, base: WorkflowState | None, records: TailRecords) -> WorkflowState:
        """One workflow from its snapshot (if any) and its events after the checkpoint.

        A run that ended is summarized from the few events that matter, without folding
        its whole history; a live run is folded event by event.
        """
        if base is not None and base.is_terminal:
            return base  # a finished run's snapshot: nothing can follow it
        decode = self.ctx.codec.decode
        decider = self.ctx.decider

        def event(value: bytes | None) -> Any:
            if value is None:
                raise DecodeError("an event record has no value")
            return decode(value)

        types = [t for t, _ in records]
        starts_here = base is not None or types[0] == "WorkflowStarted"
        if types[-1] in TERMINAL_TYPES and None not in types and starts_here:
            needed = [event(v) for t, v in records if t in SUMMARY_TYPES]
            return decider.summarize(base, needed)  # type: ignore[no-any-return]
        state = decider.fold((event(v) for _, v in records), base)  # one copy, not one per event
        if state is None:
            raise DecodeError("no events")
        return state.summary() if state.is_terminal else state

    # ------------------------------------------------------------------ checkpoints
    def due(self, interval_s: float, max_events: int) -> bool:
        return self.ctx.clock.monotonic() - self.last_checkpoint >= interval_s or any(
            ps.events_since_checkpoint >= max_events for ps in self.ctx.partitions.values()
        )

    def checkpoint(self) -> bool:
        """Snapshot each workflow changed since the last checkpoint, plus a partition marker.

        True when a checkpoint was committed.

        Raises what ``EventLog.commit`` raises but ``TxnAbortable`` (the checkpoint is
        aborted and tried again at the next interval).
        """
        from orchestrator.io.ports import TxnAbortable

        ctx = self.ctx
        self.last_checkpoint = ctx.clock.monotonic()
        touched = {p: ps for p, ps in ctx.partitions.items() if ps.dirty or ps.dirty_quarantine}
        if not touched:
            return False
        now = ctx.clock.now_ms()
        ctx.log.flush()  # every delivery report in: events_end is exact
        ctx.log.begin()
        try:
            for p, ps in touched.items():
                for wf, state in ps.dirty.items():
                    if state.unfolded_from is not None:
                        continue  # a stand-in: the process with the version folds the events
                    self._write_state(
                        p,
                        wf,
                        state.run_id,
                        state.seq,
                        state.to_json(fast_json.dumps_sorted),
                        ps,
                        now,
                        state,
                    )
                for wf in ps.dirty_quarantine:
                    reason = ps.quarantined.get(wf)
                    if reason is not None:
                        self._write_state(p, wf, "", 0, quarantine_json(reason), ps, now)
                marker = min(ps.events_end, self.held.get(p, ps.events_end))
                deferred = ps.deferred_from()
                if deferred is not None:  # their events are in no snapshot yet
                    marker = min(marker, deferred)
                self._produce(p, CHECKPOINT_KEY, "", 0, "", marker, now)
            ctx.log.commit({})
        except TxnAbortable as exc:
            log.warning("checkpoint aborted, will retry: %s", exc)
            ctx.log.abort()
            return False
        for ps in touched.values():
            ps.checkpointed()
        return True

    def _write_state(
        self,
        p: int,
        wf: str,
        run_id: str,
        seq: int,
        js: str,
        ps: PartitionState,
        now: int,
        state: WorkflowState | None = None,
    ) -> None:
        if len(js) <= CHUNK_CHARS:
            headers = snapshot_headers(state) if state is not None else ()
            self._produce(p, wf, run_id, seq, js, ps.events_end, now, headers)
            return
        pieces = [js[i : i + CHUNK_CHARS] for i in range(0, len(js), CHUNK_CHARS)]
        for i, piece in enumerate(pieces):
            self._produce(p, f"{CHUNK_PREFIX}{wf}/{i}", run_id, seq, piece, ps.events_end, now)
        head = json.dumps({_CHUNKS_FIELD: len(pieces)})
        self._produce(p, wf, run_id, seq, head, ps.events_end, now)

    def _produce(
        self,
        p: int,
        key: str,
        run_id: str,
        seq: int,
        js: str,
        events_end: int,
        now: int,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        env = snapshot_envelope(key, run_id, seq, js, events_end, now)
        value = check_record_size(self.ctx.codec.encode(env), f"the snapshot of {key}")
        self.ctx.log.append(
            self.ctx.topics.snapshots, value, key.encode(), partition=p, headers=headers
        )
