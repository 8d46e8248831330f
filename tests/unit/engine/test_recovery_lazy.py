"""Live runs restored from a snapshot are held as text and parsed when first used.

The rebuild reads only what it needs (status, armed timers); a run whose snapshot turns
out unreadable when it is used is quarantined, never treated as absent.
"""

from __future__ import annotations

from orchestrator.engine.recovery import CHECKPOINT_KEY
from orchestrator.io.partitioning import partition_for
from orchestrator.records.envelopes import snapshot_envelope
from tests.unit.memory_rig import MemoryRig, codec


def test_an_untouched_live_run_stays_unparsed_and_its_timer_is_armed(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("sleeper", "timer_demo", {"seconds": 3600})
    rig.start("waiting", "document_review", {"document": "a"})
    rig.run()
    rig.orch.checkpoint()
    fresh = rig.new_orchestrator()
    rig.orch = fresh
    fresh.step()
    ps = fresh.partitions[partition_for(b"sleeper", 4)]
    assert "sleeper" in ps.unparsed and "sleeper" not in ps.live
    assert [(wf, tid) for wf, tid, _ in ps.timers() if wf == "sleeper"] != []
    assert len(fresh.timers) >= 1
    assert fresh.health()["live_workflows"] == 2
    # used: parsed once, then held as a state
    rig.signal("waiting", "documents_added", {"document": "b"})
    rig.run()
    pw = fresh.partitions[partition_for(b"waiting", 4)]
    assert "waiting" in pw.live and "waiting" not in pw.unparsed
    assert [e.seq for e in rig.events("waiting")] == list(range(1, len(rig.events("waiting")) + 1))


def test_a_live_snapshot_unreadable_when_used_quarantines_the_run(tmp_path):
    rig = MemoryRig(tmp_path)
    p = partition_for(b"broken", 4)
    bad = '{"status":"running","timers":{}}'  # JSON, but not a workflow state
    for key, js in (("broken", bad), (CHECKPOINT_KEY, "")):
        env = snapshot_envelope(key, "run-1", 3 if js else 0, js, 0, 1)
        rig.broker.produce(
            rig.topics.snapshots, value=codec.encode(env), key=key.encode(), partition=p
        )
    rig.orch.step()  # assignment: the broken run is held unparsed
    assert "broken" in rig.orch.partitions[p].unparsed
    rig.start("broken", "three_step", {"n": 1})
    rig.orch.step()
    rig.start("broken", "three_step", {"n": 1})
    rig.orch.step()
    assert rig.events("broken") == [], "never a second run at seq 1"
    assert "broken" in rig.orch.partitions[p].quarantined
    reasons = [letter.payload.reason for letter in rig.letters()]
    assert len(reasons) == 2
    assert "unreadable snapshot" in reasons[0]
    assert reasons[1].startswith("workflow 'broken' is quarantined: unreadable snapshot")
