"""Looking at one workflow's read-model row until it shows what a caller waits for: the
``answer`` and ``pause`` that ``KeelClient.start`` and ``wait`` give
:func:`~orchestrator.client.awaiting.await_answer`.

While the projector's announcements are heard (``row_watch.py``), each carries the row as
written (``read_model_rows.py``), so the next look takes it instead of reading Redis; the
row is still read at least every 50 ms, as pub/sub is not durable. Without announcements
the row is polled, every 2 ms for the first quarter second (most runs of a few local steps
end within it; a GET is ~0.1 ms on loopback), then backing off.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from orchestrator.io.redis.read_model import Projection
from orchestrator.io.redis.row_watch import RowWatch
from orchestrator.records.read_model_rows import announced_row

__all__ = ["CLOSE_POLL_FOR_S", "CLOSE_POLL_S", "WATCHED_POLL_S", "RowLook"]

CLOSE_POLL_S = 0.002
CLOSE_POLL_FOR_S = 0.25
#: While announcements are heard, the row is still read this often at least.
WATCHED_POLL_S = 0.05


def poll_delay(elapsed_s: float, slowest_s: float) -> float:
    """Poll every 2 ms for the first quarter second, then back off to ``slowest_s``."""
    if elapsed_s < CLOSE_POLL_FOR_S:
        return min(CLOSE_POLL_S, slowest_s)
    return min(slowest_s, max(CLOSE_POLL_S, elapsed_s / 10))


class RowLook:
    """Looks at the row of ``workflow_id``: :meth:`answer` is the row once it exists (and,
    with ``stops``, once its status is one of them); :meth:`pause` waits for an
    announcement or the next poll. ``last`` is the row last seen (None: none yet)."""

    def __init__(
        self,
        projection: Projection,
        watch: RowWatch,
        workflow_id: str,
        stops: Collection[str] | None,
        poll_s: float,
        seen: dict[str, Any] | None = None,
    ) -> None:
        self.projection = projection
        self.watch = watch
        self.workflow_id = workflow_id
        self.stops = stops
        self.poll_s = poll_s
        self.began = time.monotonic()
        #: A row known to be current (announced, or read since the subscription began):
        #: the next look takes it instead of reading.
        self.fresh = seen
        self.last: dict[str, Any] | None = None

    def answer(self) -> dict[str, Any] | None:
        row = self.fresh if self.fresh is not None else self.projection.get(self.workflow_id)
        self.fresh = None
        if row is None:
            return None
        self.last = row
        return row if self.stops is None or row["status"] in self.stops else None

    def pause(self, left_s: float) -> None:
        delay = poll_delay(time.monotonic() - self.began, self.poll_s)
        if self.watch.watching(self.workflow_id):
            # Changes are announced in order, each with the row read after the write that
            # changed it: as fresh as a read.
            note = self.watch.next(min(left_s, max(delay, WATCHED_POLL_S)))
            self.fresh = announced_row(self.workflow_id, note)
        else:
            time.sleep(min(left_s, delay))
