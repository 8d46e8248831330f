"""A stopping orchestrator gives its final checkpoint ``FINAL_CHECKPOINT_S``, no more.

The checkpoint only shortens the next owner's rebuild. Against a broker that does not
answer, its calls retried while SIGTERM waited (30 s in the fault suite's frozen-broker
test): once the bound has passed, the adapters' calls see the stop and end.
"""

from __future__ import annotations

from orchestrator.engine.orchestrator import FINAL_CHECKPOINT_S
from orchestrator.records.clock import ManualClock
from tests.unit.memory_rig import MemoryRig


def test_the_final_checkpoint_is_stoppable_once_its_bound_has_passed(tmp_path):
    clock = ManualClock()
    orch = MemoryRig(tmp_path, clock=clock).orch
    assert not orch._stopping()  # running

    orch.stop()
    assert orch._stopping()  # stopping, no checkpoint draining: calls end at once

    orch._drain_until = clock.monotonic() + FINAL_CHECKPOINT_S
    orch._draining.set()
    assert not orch._stopping()  # the final checkpoint's calls may run
    clock.advance(FINAL_CHECKPOINT_S)
    assert not orch._stopping()
    clock.advance(0.001)
    assert orch._stopping()  # past its bound: they end


def test_a_second_stop_ends_the_final_checkpoint_at_once(tmp_path):
    clock = ManualClock()
    orch = MemoryRig(tmp_path, clock=clock).orch
    orch.stop()
    orch._drain_until = clock.monotonic() + FINAL_CHECKPOINT_S
    orch._draining.set()
    assert not orch._stopping()
    orch.stop()
    assert orch._stopping()
