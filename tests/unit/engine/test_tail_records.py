"""A decision's last event carries a ``keel.armed`` header; a rebuild from the log holds a
live run's tail undecoded and folds it on first use or in the background
(``tail_records``; git show 6f66b40:docs/performance.md, "Cold rebuild").
"""

from __future__ import annotations

import json

import pytest

from orchestrator.engine.recovery import CHECKPOINT_KEY, TYPE_HEADER
from orchestrator.engine.tail_records import ARMED_HEADER, parse_armed
from orchestrator.io.partitioning import partition_for
from tests.unit.engine.test_snapshot_headers import _count_decodes
from tests.unit.memory_rig import MemoryRig, codec

P = 4


def _sleepers(rig: MemoryRig, n: int, finished: int = 0) -> None:
    for i in range(n):
        rig.start(f"sleeper-{i}", "timer_demo", {"seconds": 3600})
    for i in range(finished):
        rig.start(f"done-{i}", "timer_demo", {"seconds": 0})
    rig.run()


def _full_folds(rig: MemoryRig) -> dict[str, str]:
    by_wf: dict[str, list] = {}
    for env in rig.events():
        by_wf.setdefault(env.workflow_id, []).append(env)
    out = {}
    for wf, events in by_wf.items():
        state = rig.orch.decider.fold(events)
        out[wf] = (state.summary() if state.is_terminal else state).to_json()
    return out


def _markers(rig: MemoryRig) -> dict[int, int]:
    """The newest checkpoint marker per partition: the events offset it says is covered."""
    out = {}
    for rec in rig.broker.records(rig.topics.snapshots):
        if rec.key == CHECKPOINT_KEY.encode():
            out[rec.partition] = codec.decode(rec.value).payload.events_offset
    return out


def test_a_decisions_last_event_says_what_a_rebuild_needs(tmp_path):
    rig = MemoryRig(tmp_path)
    _sleepers(rig, 1, finished=1)
    state = rig.orch.partitions[partition_for(b"sleeper-0", P)].get("sleeper-0")
    armed = [
        (rec.key, json.loads(dict(rec.headers)[ARMED_HEADER]))
        for rec in rig.broker.records(rig.topics.events)
        if ARMED_HEADER in dict(rec.headers)
    ]
    last = [meta for key, meta in armed if key == b"sleeper-0"][-1]
    assert parse_armed(last) == (state.name, state.version, state.pending_timers())
    assert len(state.pending_timers()) == 1
    # A run that ended has no timer left; its last event still names its definition.
    events = [r for r in rig.broker.records(rig.topics.events) if r.key == b"done-0"]
    assert dict(events[-1].headers)[TYPE_HEADER] == b"WorkflowCompleted"
    meta = parse_armed(json.loads(dict(events[-1].headers)[ARMED_HEADER]))
    assert meta == (state.name, state.version, [])
    # One header per decision: on its last event only.
    decisions = [
        r for r in rig.broker.records(rig.topics.events) if ARMED_HEADER in dict(r.headers)
    ]
    assert 0 < len(decisions) < len(rig.broker.records(rig.topics.events))


def test_a_rebuild_from_the_log_decodes_no_event(tmp_path, monkeypatch):
    rig = MemoryRig(tmp_path)
    _sleepers(rig, 6, finished=3)
    want = _full_folds(rig)
    decodes = _count_decodes(monkeypatch)
    rebuilt = rig.new_orchestrator().recovery.recover(list(range(P)), use_snapshots=False)
    assert decodes[0] == 0  # the timers are armed from the headers alone
    deferred = {wf for ps in rebuilt.values() for wf in ps.deferred}
    assert (
        deferred == set(want) == {f"sleeper-{i}" for i in range(6)} | {"done-0", "done-1", "done-2"}
    )
    assert sum(ps.live_count() for ps in rebuilt.values()) == 6
    assert sum(ps.count() for ps in rebuilt.values()) == 9
    armed = sorted(t for ps in rebuilt.values() for t in ps.timers())
    want_timers = []
    for wf in sorted(deferred):
        state = rig.orch.decider.fold(rig.events(wf))
        if not state.is_terminal:
            want_timers += [(wf, t, at) for t, at in state.pending_timers()]
    assert armed == sorted(want_timers) and len(armed) == 6
    for wf, js in want.items():
        assert rebuilt[partition_for(wf.encode(), P)].get(wf).to_json() == js, wf
    assert not any(ps.deferred for ps in rebuilt.values())
    assert decodes[0] > 0  # the folds happened on use
    assert sum(ps.live_count() for ps in rebuilt.values()) == 6
    assert sum(ps.count() for ps in rebuilt.values()) == 9


def test_deferred_runs_keep_the_checkpoint_marker_before_their_events(tmp_path):
    rig = MemoryRig(tmp_path)
    _sleepers(rig, 6)
    want = _full_folds(rig)
    second = rig.new_orchestrator()
    second.ctx.partitions.update(second.recovery.recover(list(range(P)), use_snapshots=False))
    p, ps = next((p, ps) for p, ps in second.partitions.items() if len(ps.deferred) >= 2)
    first = ps.deferred_from()
    assert first == min(tail.first for tail in ps.deferred.values())
    # One run is used (folded, dirty); the checkpoint writes it but may not pass the others.
    used = max(ps.deferred, key=lambda wf: ps.deferred[wf].first)  # its events after the marker
    ps.get(used)
    assert second.recovery.checkpoint()
    assert _markers(rig)[p] == ps.deferred_from() <= ps.events_end
    # A crash now: the next rebuild reads the deferred runs' events again.
    third = rig.new_orchestrator()
    third.ctx.partitions.update(third.recovery.recover([p]))
    again = third.partitions[p]
    assert set(again.deferred) == set(ps.deferred) | {used}
    assert isinstance(again.deferred[used].base, bytes)  # its snapshot, the tail after it
    assert again.get(used).to_json() == want[used]
    # Folded in the background, then checkpointed: the marker passes every event.
    assert again.fold_deferred(float("inf")) >= 1 and not again.deferred
    assert third.recovery.checkpoint()
    assert _markers(rig)[p] == again.events_end
    fourth = rig.new_orchestrator().recovery.recover([p])
    assert not fourth[p].deferred  # restored from snapshots, no tail to defer
    assert set(fourth[p].unparsed) == set(again.live)
    for wf in again.live:
        assert fourth[p].get(wf).to_json() == want[wf], wf


def test_the_loop_folds_deferred_runs_between_batches(tmp_path):
    rig = MemoryRig(tmp_path)
    _sleepers(rig, 8, finished=4)
    want = _full_folds(rig)
    fresh = rig.new_orchestrator()  # no checkpoint was written: the rebuild is the log's
    fresh.step()  # assignment: the rebuild defers
    health = fresh.health()
    assert (health["deferred_workflows"], health["live_workflows"]) == (12, 8)
    assert health["finished_workflows"] == 4
    for _ in range(50):
        if not any(ps.deferred for ps in fresh.partitions.values()):
            break
        fresh.step()
    assert not any(ps.deferred for ps in fresh.partitions.values())
    health = fresh.health()
    assert (health["deferred_workflows"], health["live_workflows"]) == (0, 8)
    for wf, js in want.items():
        ps = fresh.partitions[partition_for(wf.encode(), P)]
        assert wf in ps.dirty  # the next checkpoint writes it
        assert (wf in ps.live) is wf.startswith("sleeper")
        assert ps.get(wf).to_json() == js


def _append_event(rig: MemoryRig, wf: str, value: bytes, armed: bytes) -> None:
    rig.broker.produce(
        rig.topics.events,
        value=value,
        key=wf.encode(),
        partition=partition_for(wf.encode(), P),
        headers=((TYPE_HEADER, b"SignalReceived"), (ARMED_HEADER, armed)),
    )


def _records_of(rig: MemoryRig, wf: str) -> int:
    return sum(1 for r in rig.broker.records(rig.topics.events) if r.key == wf.encode())


def test_a_deferred_tail_that_cannot_be_folded_quarantines_the_run_when_used(tmp_path):
    rig = MemoryRig(tmp_path)
    _sleepers(rig, 1)
    state = rig.orch.partitions[partition_for(b"sleeper-0", P)].get("sleeper-0")
    armed = json.dumps([state.name, state.version, [["wait", 10**13]]]).encode()
    _append_event(rig, "sleeper-0", b"\xc3\x01garbage", armed)
    fresh = rig.new_orchestrator()
    fresh.step()
    ps = fresh.partitions[partition_for(b"sleeper-0", P)]
    assert "sleeper-0" not in ps.quarantined  # nothing decoded it yet
    for _ in range(5):
        fresh.step()
    assert "sleeper-0" not in ps.deferred
    assert ps.quarantined["sleeper-0"].startswith("cannot rebuild: ")
    before = _records_of(rig, "sleeper-0")
    rig.signal("sleeper-0", "poke", {})
    fresh.step()
    assert _records_of(rig, "sleeper-0") == before  # never decided on a broken history
    [letter] = rig.letters()
    assert "is quarantined: cannot rebuild: " in letter.payload.reason


@pytest.mark.parametrize(
    "armed",
    [b'["timer_demo", 99, []]', b"not json", b'{"a": 1}', b'["timer_demo", 1, [["t"]]]'],
    ids=["missing-version", "not-json", "not-a-list", "bad-timers"],
)
def test_a_header_the_rebuild_cannot_use_folds_the_run_now(tmp_path, armed):
    rig = MemoryRig(tmp_path)
    _sleepers(rig, 2)
    last = [r for r in rig.broker.records(rig.topics.events) if r.key == b"sleeper-0"][-1]
    _append_event(rig, "sleeper-0", last.value, armed)  # a redelivered copy: seq skipped
    want = _full_folds(rig)
    p = partition_for(b"sleeper-0", P)
    rebuilt = rig.new_orchestrator().recovery.recover([p], use_snapshots=False)
    assert "sleeper-0" not in rebuilt[p].deferred
    assert "sleeper-0" in rebuilt[p].live
    assert rebuilt[p].get("sleeper-0").to_json() == want["sleeper-0"]


def test_a_start_for_a_deferred_finished_run_never_opens_a_second_run(tmp_path):
    rig = MemoryRig(tmp_path)
    _sleepers(rig, 0, finished=1)
    before = _records_of(rig, "done-0")
    fresh = rig.new_orchestrator()
    fresh.step()  # assignment: the rebuild defers the finished run
    ps = fresh.partitions[partition_for(b"done-0", P)]
    assert "done-0" in ps.deferred and ps.live_count() == 0
    rig.start("done-0", "timer_demo", {"seconds": 0}, mid="done-0/again")
    fresh.step()
    assert _records_of(rig, "done-0") == before
    assert "done-0" not in ps.deferred
    assert str(ps.get("done-0").status) == "completed"
