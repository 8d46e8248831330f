"""What a snapshot record in ``keel.snapshots`` says in its Kafka header, so a rebuild
need not decode it.

A checkpoint writes one record per changed run (the Avro ``WorkflowSnapshot`` envelope,
unchanged) with one header, :data:`SNAPSHOT_HEADER`, a short JSON array:

* ``["live", [[timer_id, fire_at], ...]]`` for a live run: the rebuild arms its timers
  and keeps the record's bytes; the envelope and the state JSON are decoded only when a
  command or timer touches the run (``PartitionState.unparsed``);
* ``["finished", run_id, name, version, digest, seq, status, started_at, updated_at]``
  for a finished run: its identity (``owned.FinishedRuns``), the bytes kept only for
  the most recent ones.

A record without the header (written before it existed, a chunked state's head, a
quarantine, the checkpoint marker) is decoded as before, so old snapshots stay
readable; a header this code cannot read is ignored the same way. Measured in
git show 6f66b40:docs/performance.md, "Recovery".
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from orchestrator.domain.model.messages import WorkflowSnapshot
from orchestrator.domain.model.state import TERMINAL_STATUSES, WorkflowState
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.payload_schemas.codec import Codec, DecodeError

__all__ = [
    "SNAPSHOT_HEADER",
    "SnapshotKind",
    "parse_snapshot_meta",
    "read_snapshot_header",
    "snapshot_headers",
    "snapshot_state_json",
]

#: The header of a snapshot record that tells a rebuild what it needs without decoding.
SNAPSHOT_HEADER = "keel.snapshot"

_COMPACT = (",", ":")


class SnapshotKind(StrEnum):
    LIVE = "live"
    FINISHED = "finished"


def snapshot_headers(state: WorkflowState) -> list[tuple[str, bytes]]:
    """The header of the snapshot record of ``state`` (a finished run: its summary)."""
    if state.is_terminal:
        meta: list[Any] = [
            SnapshotKind.FINISHED.value,
            state.run_id,
            state.name,
            state.version,
            state.digest,
            state.seq,
            str(state.status),
            state.started_at,
            state.updated_at,
        ]
    else:
        meta = [SnapshotKind.LIVE.value, [[t, at] for t, at in state.pending_timers()]]
    return [(SNAPSHOT_HEADER, json.dumps(meta, separators=_COMPACT).encode())]


def read_snapshot_header(raw: bytes) -> tuple[SnapshotKind, list[Any]]:
    """``(kind, fields)`` of a :data:`SNAPSHOT_HEADER` value; ``ValueError`` if unreadable.

    ``fields`` is the timers ``[(timer_id, fire_at), ...]`` (earliest first) of a live
    run, or the identity fields after the kind of a finished one.
    """
    return parse_snapshot_meta(json.loads(raw))


def parse_snapshot_meta(meta: Any) -> tuple[SnapshotKind, list[Any]]:
    """:func:`read_snapshot_header` of a header already parsed as JSON."""
    if not isinstance(meta, list) or not meta:
        raise ValueError("a snapshot header must be a non-empty JSON array")
    if meta[0] == "live":  # the common case first, without an enum lookup
        if len(meta) != 2 or not isinstance(meta[1], list):
            raise ValueError('a live snapshot header is ["live", timers]')
        try:
            timers = [(str(t), int(at)) for t, at in meta[1]]
        except TypeError as exc:
            raise ValueError(f"unreadable timers in a snapshot header: {exc}") from None
        if len(timers) > 1:
            timers.sort(key=lambda x: (x[1], x[0]))
        return SnapshotKind.LIVE, timers
    if meta[0] != SnapshotKind.FINISHED or len(meta) != 9:
        raise ValueError(f"unknown snapshot header kind {str(meta[0])[:40]!r}")
    run_id, name, version, digest, seq, status, started_at, updated_at = meta[1:]
    status = WorkflowStatus(status)
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"a finished snapshot header says {status}")
    try:
        fields = [str(run_id), str(name), int(version), str(digest), int(seq), status]
        return SnapshotKind.FINISHED, [*fields, int(started_at), int(updated_at)]
    except TypeError as exc:
        raise ValueError(f"unreadable identity in a snapshot header: {exc}") from None


def snapshot_state_json(codec: Codec, wf: str, value: bytes) -> str:
    """The state JSON in the snapshot record ``value`` of run ``wf`` (decoded on use)."""
    env = codec.decode(value)
    snap = env.payload
    if not isinstance(snap, WorkflowSnapshot):
        raise DecodeError(f"{env.type} is not a snapshot")
    if env.workflow_id != wf:
        raise DecodeError(f"the snapshot of {env.workflow_id!r} is keyed {wf!r}")
    return snap.state_json
