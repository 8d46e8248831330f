"""What an event record in ``keel.events`` says in its Kafka header, so a rebuild can hold
a live run's tail undecoded.

The last event of every decision that leaves a run live carries :data:`ARMED_HEADER`, a
short JSON array ``[name, version, [[timer_id, fire_at], ...]]``: the run's definition
and its armed timers after the decision. A rebuild from the log (``recovery.py``) that
finds it on a live run's last event, with that definition here, arms the timers and
keeps the run's events as bytes (``PartitionState.deferred``); they are decoded and
folded when a command or timer touches the run, or in the background soon after the
rebuild (``Orchestrator.step``), and until then the partition's checkpoint marker stays
before them. It is the snapshot header's idea (``snapshot_records``) applied to the tail.

An event without the header (written before it existed, or by a decision that finished
the run) takes the eager path; a header this code cannot read too. See
docs/performance.md ("Cold rebuild").
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.domain.state import WorkflowState

__all__ = ["ARMED_HEADER", "armed_header", "parse_armed"]

#: The header of a decision's last event that says what a rebuild needs of a live run.
ARMED_HEADER = "keel.armed"


def armed_header(state: WorkflowState) -> tuple[str, bytes]:
    """The header for the last event of a decision that leaves ``state`` live."""
    timers = state.timers
    if not timers:  # most decisions: no timer armed, no sort and no list to build
        return ARMED_HEADER, json.dumps([state.name, state.version, []]).encode()
    armed = [[t, at] for t, at in state.pending_timers()]
    return ARMED_HEADER, json.dumps([state.name, state.version, armed]).encode()


def parse_armed(meta: Any) -> tuple[str, int, list[tuple[str, int]]]:
    """``(name, version, timers)`` of an :data:`ARMED_HEADER` value already parsed as
    JSON, the timers earliest first; ``ValueError`` if it is not one."""
    if not isinstance(meta, list) or len(meta) != 3 or not isinstance(meta[2], list):
        raise ValueError("an armed header is [name, version, timers]")
    name, version, raw = meta
    if not isinstance(name, str) or not isinstance(version, int):
        raise ValueError("an armed header names a definition and its version")
    try:
        timers = [(str(t), int(at)) for t, at in raw]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"unreadable timers in an armed header: {exc}") from None
    if len(timers) > 1:
        timers.sort(key=lambda x: (x[1], x[0]))
    return name, version, timers
