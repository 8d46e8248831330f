"""Where an orchestrator's projector runs (``keel orchestrator --projector-in``).

A vocabulary of its own so the command line can name it without loading the runtime.
Why the child is the default: docs/performance.md, "Where the projector runs".
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ProjectorPlacement"]


class ProjectorPlacement(StrEnum):
    #: A ``keel projector --feed-fd`` child process fed the committed events by pipe; it
    #: folds and writes outside the orchestrator's GIL (the default).
    CHILD = "child"
    #: A thread of the orchestrator process, fed the committed events in memory.
    THREAD = "thread"
