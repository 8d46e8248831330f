"""A rebuild, and the folds it defers, run with Python's cyclic collector paused and
leave it as they found it; a rebuild leaves what it built out of the collector's reach.

The collector's passes over the rebuild's long-lived records and states freed nothing
and cost about a quarter of a cold rebuild (git show 6f66b40:docs/performance.md, "Cold rebuild").
"""

from __future__ import annotations

import gc

import pytest

from orchestrator.engine.recovery import Recovery
from tests.unit.memory_rig import MemoryRig


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


def test_a_rebuild_leaves_what_it_built_to_no_collector_pass_and_the_folds_freeze_nothing(
    tmp_path,
):
    """The survivors of a rebuild go to the permanent generation (``gc.freeze``): turning
    the collector back on must not start a pass over all of them. The 5 ms background
    folds must not freeze: another thread's cyclic garbage would never be collected."""
    rig = MemoryRig(tmp_path)
    for i in range(20):
        rig.start(f"wf-{i}", "timer_demo", {"seconds": 0 if i % 2 else 3600})
    rig.run()
    rig.orch = rig.new_orchestrator()
    was = gc.isenabled()
    gc.enable()
    try:
        gc.unfreeze()
        rig.orch.step()  # assignment: the rebuild from the events
        frozen = gc.get_freeze_count()
        assert frozen > 0, "a rebuild with the collector on moves what it built out of reach"
        deferred = {wf for ps in rig.orch.partitions.values() for wf in ps.deferred}
        assert deferred, "the rebuild deferred the runs' tails"
        tracked = {id(o) for o in gc.get_objects()}  # what a pass would scan
        held = [t.records for ps in rig.orch.partitions.values() for t in ps.deferred.values()]
        assert not any(id(r) in tracked for r in held), "a deferred run's records are frozen"
        for _ in range(100):  # the folds, 5 ms between batches
            if not any(ps.deferred for ps in rig.orch.partitions.values()):
                break
            rig.orch.step()
        assert not any(ps.deferred for ps in rig.orch.partitions.values())
        folded = [s for ps in rig.orch.partitions.values() for s in ps.live.values()]
        assert len(folded) == 10
        tracked = {id(o) for o in gc.get_objects()}
        assert all(id(s) in tracked for s in folded), "the folds froze the states they made"
    finally:
        gc.unfreeze()
        if not was:
            gc.disable()
