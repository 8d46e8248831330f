"""What an event record in ``keel.events`` says in its Kafka header, so a rebuild can hold
a run's tail undecoded.

The last event of every decision carries :data:`ARMED_HEADER`, a short JSON array
``[name, version, [[timer_id, fire_at], ...]]``: the run's definition and its armed
timers after the decision (none once it ended). A rebuild from the log (``recovery.py``)
that finds it on a run's last event, with that definition here, keeps the run's records
as bytes (``PartitionState.deferred``) and, for a live run, arms the timers. They are
decoded and folded (a finished run: summarized) when a command or timer touches the
run, or in the background soon after the rebuild (``Orchestrator.step``); until then
the partition's checkpoint marker stays before them, so a crash reads them again. It is
the snapshot header's idea (``snapshot_records``) applied to the tail.

An event without the header (written before it existed) takes the eager path; a header
this code cannot read, or one naming a version this process lacks (a stand-in), too.
Measured in git show 6f66b40:docs/performance.md, "Cold rebuild".
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.model.state import WorkflowState
from orchestrator.records.fast_json import dumps_bytes

__all__ = ["ARMED_HEADER", "armed_header", "parse_armed"]

#: The header of a decision's last event that says what a rebuild needs of the run.
ARMED_HEADER = "keel.armed"


def armed_header(state: WorkflowState) -> tuple[str, bytes]:
    """The header for the last event of a decision that leaves the run in ``state``."""
    timers = state.timers
    if not timers or state.is_terminal:  # most decisions: no timer armed, nothing to sort
        return ARMED_HEADER, dumps_bytes([state.name, state.version, []])
    armed = [[t, at] for t, at in state.pending_timers()]
    return ARMED_HEADER, dumps_bytes([state.name, state.version, armed])


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
