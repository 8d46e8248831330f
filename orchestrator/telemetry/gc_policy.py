"""How often Python's cyclic garbage collector runs in Keel's services.

Python starts a young-generation pass every 700 net allocations of container objects.
Keel's services allocate a few hundred per workflow step (decoded envelopes, states,
records) and keep most of them alive for a while, and reference counting frees almost
all of the rest: the passes scan much and free little. Under load they took about a
sixth of the orchestrator's and the projector child's CPU
(git show 6f66b40:docs/performance.md, "The child by default, the cyclic collector").
Keel raises the thresholds (``KEEL_GC_THRESHOLDS``, default ``[100000, 50, 1000]``;
docs/performance.md, "Settings"); reference cycles are still collected, later. Rebuilds
pause the collector altogether (``owned.collector_paused``).
"""

from __future__ import annotations

import gc

from orchestrator.config.settings import Settings

__all__ = ["configure_gc"]


def configure_gc(settings: Settings) -> None:
    """Apply ``settings.gc_thresholds`` to this process (a service's first step)."""
    gc.set_threshold(*settings.gc_thresholds)
