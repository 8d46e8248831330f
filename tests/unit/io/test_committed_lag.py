"""The in-process hand-off remembers when the oldest batch it hands over was published,
so the projector can report commit-to-read-model lag (git show 6f66b40:docs/performance.md,
"The read model without the lag")."""

from __future__ import annotations

import time

from orchestrator.io.handoff.committed_channel import CommittedEvents


def test_take_reports_when_its_oldest_batch_was_published():
    ch = CommittedEvents()
    ch.listen()
    before = time.monotonic()
    ch.publish(["a"])  # type: ignore[list-item]
    between = time.monotonic()
    ch.publish(["b"])  # type: ignore[list-item]
    assert ch.take(0) == ["a", "b"]
    assert before <= ch.taken_since <= between
    assert ch.take(0) == []
    assert before <= ch.taken_since <= between, "an empty take leaves it as it was"
