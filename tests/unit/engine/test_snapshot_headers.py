"""Snapshot records carry a ``keel.snapshot`` header; a rebuild reads it instead of the
record (git show 6f66b40:docs/performance.md, "Recovery").

Live runs are armed from the header and decoded on first use; finished runs become
identities, the most recent ones keeping their summary; a record without the header
(the format before it) or with one this code cannot read is decoded as before.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.domain.model.state import WorkflowState
from orchestrator.engine.recovery import CHECKPOINT_KEY
from orchestrator.engine.snapshot_records import (
    SNAPSHOT_HEADER,
    SnapshotKind,
    read_snapshot_header,
)
from orchestrator.io.partitioning import partition_for
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import snapshot_envelope
from tests.unit.memory_rig import MemoryRig, codec


def _snapshot_records(rig: MemoryRig, wf: str) -> list:
    return [r for r in rig.broker.records(rig.topics.snapshots) if r.key == wf.encode()]


def _count_decodes(monkeypatch) -> list[int]:
    calls = [0]
    real = Codec.decode

    def counting(self, data):
        calls[0] += 1
        return real(self, data)

    monkeypatch.setattr(Codec, "decode", counting)
    return calls


def test_a_checkpoint_writes_the_header_a_rebuild_needs(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("sleeper", "timer_demo", {"seconds": 3600})
    rig.start("done", "timer_demo", {"seconds": 0})
    rig.run()
    rig.orch.checkpoint()
    [live] = _snapshot_records(rig, "sleeper")
    kind, timers = read_snapshot_header(dict(live.headers)[SNAPSHOT_HEADER])
    state = rig.orch.partitions[partition_for(b"sleeper", 4)].get("sleeper")
    assert (kind, timers) == (SnapshotKind.LIVE, state.pending_timers())
    assert len(timers) == 1
    [done] = _snapshot_records(rig, "done")
    kind, fields = read_snapshot_header(dict(done.headers)[SNAPSHOT_HEADER])
    summary = rig.orch.partitions[partition_for(b"done", 4)].get("done")
    assert kind is SnapshotKind.FINISHED
    assert fields == [
        summary.run_id,
        summary.name,
        summary.version,
        summary.digest,
        summary.seq,
        "completed",
        summary.started_at,
        summary.updated_at,
    ]


def test_a_rebuild_decodes_no_snapshot_of_a_run_nothing_touches(tmp_path, monkeypatch):
    rig = MemoryRig(tmp_path)
    for i in range(8):
        rig.start(f"sleeper-{i}", "timer_demo", {"seconds": 3600})
        rig.start(f"done-{i}", "timer_demo", {"seconds": 0})
    rig.run()
    rig.orch.checkpoint()
    before = {
        wf: s.to_json() for ps in rig.orch.partitions.values() for wf, s in ps.workflows.items()
    }
    calls = _count_decodes(monkeypatch)
    fresh = rig.new_orchestrator()
    rebuilt = fresh.recover(list(range(4)))
    # only the four partition markers are decoded: the runs come from their headers
    assert calls[0] == 4
    assert sum(len(ps.unparsed) for ps in rebuilt.values()) == 8
    assert sorted(wf for ps in rebuilt.values() for wf, _, _ in ps.timers()) == sorted(
        f"sleeper-{i}" for i in range(8)
    )
    after = {wf: ps.get(wf).to_json() for ps in rebuilt.values() for wf in list(ps.unparsed)}
    after.update(
        {
            f"done-{i}": rebuilt[partition_for(f"done-{i}".encode(), 4)].get(f"done-{i}").to_json()
            for i in range(8)
        }
    )
    assert after == before


def test_a_finished_run_keeps_its_summary_after_a_restart(tmp_path):
    rig = MemoryRig(tmp_path, finished_capacity=1)
    rig.start("a", "timer_demo", {"seconds": 0}, mid="start-a")
    rig.start("b", "timer_demo", {"seconds": 0}, mid="start-b")
    rig.run()
    rig.orch.checkpoint()
    want = {wf: rig.orch.partitions[partition_for(wf.encode(), 4)].get(wf) for wf in "ab"}
    rig.orch = rig.new_orchestrator()
    rig.orch.step()
    pa, pb = (rig.orch.partitions[partition_for(w, 4)] for w in (b"a", b"b"))
    assert "a" in pa.finished and "b" in pb.finished
    # the same start delivered again is recognised as already handled, not refused
    events_before = len(rig.events())
    rig.start("a", "timer_demo", {"seconds": 0}, mid="start-a")
    rig.orch.step()
    assert len(rig.events()) == events_before
    assert rig.letters() == []
    assert pa.get("a").to_json() == want["a"].to_json()
    # "b" was written last in its partition: its summary itself, not just its identity
    assert pb.get("b").to_json() == want["b"].to_json()
    assert pb.get("b").input_json != ""


def test_old_snapshots_without_the_header_are_still_read(tmp_path, monkeypatch):
    rig = MemoryRig(tmp_path)
    rig.start("sleeper", "timer_demo", {"seconds": 3600})
    rig.run()
    state = rig.orch.partitions[partition_for(b"sleeper", 4)].get("sleeper")
    # what the previous version wrote: the same envelopes, no header
    p = partition_for(b"sleeper", 4)
    for key, js in (("sleeper", state.to_json()), (CHECKPOINT_KEY, "")):
        env = snapshot_envelope(key, state.run_id if js else "", state.seq if js else 0, js, 0, 1)
        rig.broker.produce(
            rig.topics.snapshots, value=codec.encode(env), key=key.encode(), partition=p
        )
    fresh = rig.new_orchestrator()
    rebuilt = fresh.recover([p])
    assert rebuilt[p].get("sleeper").to_json() == state.to_json()


@pytest.mark.parametrize(
    "header",
    [
        b"not json",
        b'["someday", 1]',
        b'["live"]',
        b'["finished", "r"]',
        b'["finished","r","n",1,"d",3,"running",1,2]',
    ],
)
def test_a_header_this_code_cannot_read_falls_back_to_the_record(tmp_path, header):
    rig = MemoryRig(tmp_path)
    rig.start("sleeper", "timer_demo", {"seconds": 3600})
    rig.run()
    rig.orch.checkpoint()
    p = partition_for(b"sleeper", 4)
    [rec] = _snapshot_records(rig, "sleeper")
    want = rig.orch.partitions[p].get("sleeper").to_json()
    rig.broker.produce(
        rig.topics.snapshots,
        value=rec.value,
        key=rec.key,
        partition=p,
        headers=((SNAPSHOT_HEADER, header),),
    )
    rebuilt = rig.new_orchestrator().recover([p])
    assert not rebuilt[p].quarantined
    assert rebuilt[p].get("sleeper").to_json() == want


def test_a_live_header_over_an_unreadable_record_quarantines_the_run_when_used(tmp_path):
    rig = MemoryRig(tmp_path)
    p = partition_for(b"broken", 4)
    header = json.dumps(["live", [["t1", 10**13]]]).encode()
    rig.broker.produce(
        rig.topics.snapshots,
        value=b"\xc3\x01garbage",
        key=b"broken",
        partition=p,
        headers=((SNAPSHOT_HEADER, header),),
    )
    env = snapshot_envelope(CHECKPOINT_KEY, "", 0, "", 0, 1)
    rig.broker.produce(
        rig.topics.snapshots, value=codec.encode(env), key=CHECKPOINT_KEY.encode(), partition=p
    )
    rig.orch.step()
    ps = rig.orch.partitions[p]
    assert [(wf, t) for wf, t, _ in ps.timers()] == [("broken", "t1")]
    rig.start("broken", "three_step", {"n": 1})
    rig.orch.step()
    assert rig.events("broken") == [], "never a second run at seq 1"
    assert "broken" in ps.quarantined
    [letter] = rig.letters()
    assert "unreadable snapshot" in letter.payload.reason


def test_a_live_header_naming_another_run_quarantines_it_when_used(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("other", "timer_demo", {"seconds": 3600})
    rig.run()
    rig.orch.checkpoint()
    [rec] = _snapshot_records(rig, "other")
    p = partition_for(b"other", 4)
    rig.broker.produce(
        rig.topics.snapshots, value=rec.value, key=b"mine", partition=p, headers=rec.headers
    )
    rebuilt = rig.new_orchestrator().recover([p])
    with pytest.raises(Exception, match="quarantined"):
        rebuilt[p].get("mine")
    assert "mine" in rebuilt[p].quarantined
    assert isinstance(rebuilt[p].get("other"), WorkflowState)
