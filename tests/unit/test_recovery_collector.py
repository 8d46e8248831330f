"""A rebuild, and the folds it defers, run with Python's cyclic collector paused and
leave it as they found it.

The collector's passes over the rebuild's long-lived records and states freed nothing
and cost about a quarter of a cold rebuild (docs/performance.md, "Cold rebuild").
"""

from __future__ import annotations

import gc

import pytest

from orchestrator.runtime.recovery import Recovery
from tests.unit.runtime_support import MemoryRig


@pytest.mark.parametrize("enabled_before", [True, False])
def test_a_rebuild_pauses_the_collector_and_restores_it(tmp_path, monkeypatch, enabled_before):
    rig = MemoryRig(tmp_path)
    rig.start("a", "timer_demo", {"seconds": 3600})
    rig.start("b", "timer_demo", {"seconds": 0})
    rig.run()
    seen: list[bool] = []
    real = Recovery._rebuild

    def watched(self, base, records):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        return real(self, base, records)

    monkeypatch.setattr(Recovery, "_rebuild", watched)
    rig.orch = rig.new_orchestrator()
    was = gc.isenabled()
    try:
        if not enabled_before:
            gc.disable()
        rig.orch.step()  # assignment: the rebuild from the events
        assert gc.isenabled() is enabled_before
        rig.orch.step()  # the folds the rebuild deferred (tail_records), between batches
        assert gc.isenabled() is enabled_before
    finally:
        if was:
            gc.enable()
    assert len(seen) == 2 and not any(seen), "every run was rebuilt with the collector paused"
    assert not any(ps.deferred for ps in rig.orch.partitions.values())
    assert rig.orch.health()["live_workflows"] == 1
