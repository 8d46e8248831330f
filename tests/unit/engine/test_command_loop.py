"""The orchestrator loop on the in-memory adapter: decide, commit, abort, recover, quarantine.

No broker: these run in seconds. The same behaviour on the real broker is covered by
tests/integration (bad input, quarantine) and tests/fault.
"""

from __future__ import annotations

import json
import sys

import pytest

from orchestrator.domain.model.messages import (
    Envelope,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerScheduled,
    WorkflowCompleted,
    WorkflowStarted,
)
from orchestrator.engine.recovery import CHECKPOINT_KEY, CHUNK_PREFIX, TYPE_HEADER
from orchestrator.io.partitioning import partition_for
from orchestrator.io.ports import CallStalled, ProducerReset, TxnAbortable
from orchestrator.records.clock import ManualClock
from orchestrator.records.envelopes import MAX_RECORD_BYTES, now_ms, runtime_envelope
from tests.unit.memory_rig import MemoryRig, codec


def _sound(events) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sum(isinstance(e.payload, WorkflowCompleted) for e in events) == 1


def test_a_workflow_runs_to_completion_through_decide_events_tasks_commit(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("wf-1", "three_step", {"n": 2})
    rig.run()
    events = rig.events("wf-1")
    _sound(events)
    assert json.loads(events[-1].payload.output_json) == {"n": 36}
    assert len(rig.broker.records(rig.topics.activity_tasks)) == 3
    assert rig.letters() == []
    # the intake offsets were committed with the transactions
    p = partition_for(b"wf-1", 4)
    committed = rig.broker.committed[("mem.orchestrator", rig.topics.commands, p)]
    assert committed == len(rig.broker.log(rig.topics.commands)[p])


def test_an_aborted_batch_is_rewound_and_decided_again_once(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.broker.inject("commit", TxnAbortable("injected: coordinator moved"))
    rig.start("wf-1", "three_step", {"n": 1})
    rig.orch.step()  # aborted: nothing visible, input rewound
    assert rig.events("wf-1") == []
    assert rig.orch.stats.aborts == 1
    rig.run()
    _sound(rig.events("wf-1"))


@pytest.mark.parametrize(
    "fault",
    [ProducerReset("injected: fenced"), CallStalled("send_offsets_to_transaction stalled")],
)
def test_a_fatal_or_stalled_commit_recreates_the_producer_and_rebuilds(tmp_path, fault):
    rig = MemoryRig(tmp_path)
    rig.start("wf-a", "three_step", {"n": 1})
    rig.run()
    epoch = rig.broker.epochs["mem.orchestrator.rig"]
    rig.broker.inject("commit", fault)
    rig.start("wf-b", "three_step", {"n": 2})
    # run() catches the reset and calls _reset; drive the same two steps here
    with pytest.raises(ProducerReset):
        rig.orch.step()
    rig.orch._reset(fault)
    assert rig.broker.epochs["mem.orchestrator.rig"] == epoch + 1  # the old epoch is fenced
    assert rig.orch.stats.producer_resets == 1
    assert sorted(rig.orch.partitions) == [0, 1, 2, 3]
    rig.run()
    _sound(rig.events("wf-a"))
    _sound(rig.events("wf-b"))


def test_recovery_from_a_checkpoint_plus_the_tail(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("done", "three_step", {"n": 1})
    rig.start("waiting", "document_review", {"document": "a"})
    rig.run()
    rig.orch.checkpoint()
    snaps = [codec.decode(r.value) for r in rig.broker.records(rig.topics.snapshots)]
    assert {e.workflow_id for e in snaps} >= {"done", "waiting", CHECKPOINT_KEY}
    rig.signal("waiting", "documents_added", {"document": "b"})
    rig.run()  # this signal is in the tail after the checkpoint
    fresh = rig.new_orchestrator()
    rig.orch = fresh
    fresh.step()  # assignment: rebuild from snapshots + tail
    p = partition_for(b"waiting", 4)
    state = fresh.partitions[p].get("waiting")
    assert state is not None and state.seq == len(rig.events("waiting"))
    rig.signal("waiting", "documents_added", {"document": "c"})
    rig.run()
    _sound(rig.events("waiting"))
    # a duplicate start of the finished run opens nothing
    rig.start("done", "three_step", {"n": 1})
    rig.run()
    assert sum(isinstance(e.payload, WorkflowStarted) for e in rig.events("done")) == 1


def _raw_event(rig, wf: str, seq: int, payload) -> None:
    env = runtime_envelope(f"{wf}/raw/{seq}", wf, "run-x", payload, 1, seq=seq)
    rig.broker.produce(
        rig.topics.events,
        codec.encode(env),
        wf.encode(),
        partition=partition_for(wf.encode(), 4),
        headers=[(TYPE_HEADER, env.type.encode())],
    )


def test_a_run_that_cannot_be_rebuilt_is_quarantined_and_refuses_commands(tmp_path):
    rig = MemoryRig(tmp_path)
    review = rig.app.latest("document_review")
    _raw_event(
        rig,
        "broken",
        1,
        WorkflowStarted("document_review", review.version, review.digest, '{"document":"a"}'),
    )
    _raw_event(rig, "broken", 2, StateEntered("no_such_state", 1))
    rig.orch.step()  # assignment rebuilds: the history cannot be folded
    p = partition_for(b"broken", 4)
    assert "no_such_state" in rig.orch.partitions[p].quarantined["broken"]
    rig.start("broken", "document_review", {"document": "a"})
    rig.signal("broken", "documents_added", {"document": "b"})
    rig.run()
    assert [e.seq for e in rig.events("broken")] == [1, 2]  # never a second seq 1
    letters = rig.letters()
    assert len(letters) == 2
    for letter in letters:
        assert letter.payload.reason.startswith("workflow 'broken' is quarantined: cannot rebuild")
    health = rig.orch.health()
    assert health["quarantined"][0]["workflow_id"] == "broken"
    # the quarantine survives a checkpoint and a restart
    rig.orch.checkpoint()
    rig.orch = rig.new_orchestrator()
    rig.orch.step()
    assert "broken" in rig.orch.partitions[p].quarantined
    rig.start("broken", "document_review", {"document": "a"})
    rig.run()
    assert [e.seq for e in rig.events("broken")] == [1, 2]


def test_a_large_state_is_snapshotted_in_chunks_and_rebuilt(tmp_path, monkeypatch):
    import orchestrator.engine.recovery as recovery

    monkeypatch.setattr(recovery, "CHUNK_CHARS", 300)
    rig = MemoryRig(tmp_path)
    rig.start("big", "document_review", {"document": "x" * 1000})
    rig.run()
    rig.orch.checkpoint()
    keys = [codec.decode(r.value).workflow_id for r in rig.broker.records(rig.topics.snapshots)]
    assert any(k.startswith(f"{CHUNK_PREFIX}big/") for k in keys)
    before = rig.orch.partitions[partition_for(b"big", 4)].get("big")
    rig.orch = rig.new_orchestrator()
    rig.orch.step()
    after = rig.orch.partitions[partition_for(b"big", 4)].get("big")
    assert after is not None and before is not None
    assert after.to_json() == before.to_json()


@pytest.mark.parametrize(
    ("produce", "reason"),
    [
        ({"value": None}, "record has no value (null)"),
        ({"value": b"\x00garbage"}, "undecodable record"),
        ({"key": None}, "record has no key; a command's key must be its workflow id"),
        ({"key": b"other"}, "record key 'other' differs from the envelope's workflow id 'wf-x'"),
        ({"partition": "wrong"}, "record arrived on partition"),
    ],
)
def test_poison_records_are_dead_lettered_and_the_batch_goes_on(tmp_path, produce, reason):
    rig = MemoryRig(tmp_path)
    home = partition_for(b"wf-x", 4)
    if produce.get("partition") == "wrong":
        produce["partition"] = (home + 1) % 4
    if "value" in produce:
        rig.broker.produce(rig.topics.commands, produce["value"], b"wf-x", partition=home)
    else:
        rig.send("wf-x", StartWorkflow("three_step", None, '{"n": 1}'), **produce)
    rig.start("wf-ok", "three_step", {"n": 3})
    rig.run()
    _sound(rig.events("wf-ok"))
    assert rig.events("wf-x") == []
    (letter,) = rig.letters()
    assert letter.payload.reason.startswith(reason), letter.payload.reason


def test_a_dead_letter_is_recorded_at_the_engines_clock_not_the_hosts(tmp_path):
    clock = ManualClock(start_ms=1_000_000_000_000)  # 2001: far from the host's time
    rig = MemoryRig(tmp_path, clock=clock)
    clock.advance(90.0)
    rig.broker.produce(rig.topics.commands, b"\x00garbage", b"wf-x", partition=0)
    rig.run()
    (letter,) = rig.letters()
    assert letter.payload.reason.startswith("undecodable record"), letter.payload.reason
    assert letter.recorded_at == 1_000_000_090_000


def test_anything_the_decider_raises_is_dead_lettered_with_the_reason(tmp_path, monkeypatch):
    rig = MemoryRig(tmp_path)
    real = rig.orch.decider.handle

    def handle(state, cmd, now):
        if cmd.workflow_id == "wf-bad":
            raise RecursionError("maximum recursion depth exceeded")
        return real(state, cmd, now)

    monkeypatch.setattr(rig.orch.decider, "handle", handle)
    rig.start("wf-bad", "three_step", {"n": 1})
    rig.start("wf-ok", "three_step", {"n": 1})
    rig.run()
    _sound(rig.events("wf-ok"))
    (letter,) = rig.letters()
    assert letter.payload.reason == "RecursionError: maximum recursion depth exceeded"


def test_an_input_past_the_limit_is_refused_and_the_letter_fits(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("wf-big", "document_review", {"document": "x" * 999_800})
    rig.start("wf-ok", "three_step", {"n": 1})
    rig.run()
    _sound(rig.events("wf-ok"))
    assert rig.events("wf-big") == []
    (letter,) = rig.letters()
    assert letter.payload.reason.startswith("the workflow input is 999,8")
    assert "value truncated from" in letter.payload.reason
    # the letter truncated what it wraps, so it fits under the limit itself
    assert all(len(r.value) <= MAX_RECORD_BYTES for r in rig.broker.records(rig.topics.dlq))


def test_an_event_too_large_for_a_record_is_refused_never_produced(tmp_path, monkeypatch):
    import orchestrator.records.envelopes as envelopes

    monkeypatch.setattr(envelopes, "MAX_RECORD_BYTES", 3_000)
    rig = MemoryRig(tmp_path)
    rig.start("wf-big", "document_review", {"document": "x" * 5_000})
    rig.start("wf-ok", "three_step", {"n": 1})
    rig.run()
    _sound(rig.events("wf-ok"))
    assert rig.events("wf-big") == []
    (letter,) = rig.letters()
    assert letter.payload.reason.startswith(
        "event WorkflowStarted of workflow 'wf-big' would be a "
    ), letter.payload.reason
    assert all(len(r.value) <= 3_000 for r in rig.broker.records(rig.topics.dlq))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "signal 'documents_added' payload nests deeper than 64"),
        ('{"n": ' + "7" * 4000 + "}", "signal 'documents_added' payload holds an integer of 4000"),
    ],
)
def test_hostile_json_is_refused_without_recursion(tmp_path, payload, reason):
    rig = MemoryRig(tmp_path)
    rig.send("wf-h", SignalWorkflow("documents_added", payload))
    rig.start("wf-ok", "three_step", {"n": 1})
    rig.run()
    _sound(rig.events("wf-ok"))
    (letter,) = rig.letters()
    assert letter.payload.reason.startswith(reason), letter.payload.reason


def test_an_invalid_workflow_id_is_dead_lettered(tmp_path):
    rig = MemoryRig(tmp_path)
    bad = "_reserved"
    rig.send(
        bad, StartWorkflow("three_step", None, '{"n": 1}'), partition=partition_for(bad.encode(), 4)
    )
    rig.run()
    (letter,) = rig.letters()
    assert letter.payload.reason.startswith("invalid workflow id '_reserved'")


def test_finished_runs_are_evicted_to_identities_memory_stays_bounded(tmp_path):
    rig = MemoryRig(tmp_path, finished_capacity=20)
    n = 400
    for i in range(n):
        rig.start(f"wf-{i}", "timer_demo", {"seconds": 0})
    for _ in range(20):
        rig.orch.step()
    rig.orch.checkpoint()
    completed = [e for e in rig.events() if isinstance(e.payload, WorkflowCompleted)]
    assert len(completed) == n
    held = sum(ps.finished.summaries_held for ps in rig.orch.partitions.values())
    assert held <= 20 * 4
    assert sum(len(ps.finished) for ps in rig.orch.partitions.values()) == n
    assert all(not ps.dirty and not ps.live for ps in rig.orch.partitions.values())
    # an evicted run still refuses a second start (no second WorkflowStarted)
    rig.start("wf-0", "timer_demo", {"seconds": 0})
    rig.run()
    assert sum(isinstance(e.payload, WorkflowStarted) for e in rig.events("wf-0")) == 1
    # and the identities are small: far below a summary each
    ps = next(iter(rig.orch.partitions.values()))
    sizes = [sys.getsizeof(v) for v in ps.finished._old.values()]
    assert sizes and max(sizes) < 200


def test_deadlines_run_from_when_the_orchestrator_takes_the_command(tmp_path):
    """A start that waited ten minutes in Kafka still gets its full timer, from decision time."""
    rig = MemoryRig(tmp_path)
    written = now_ms() - 600_000
    env = Envelope(
        message_id="late-start",
        workflow_id="wf-late",
        run_id="",
        seq=0,
        type="StartWorkflow",
        recorded_at=written,
        payload=StartWorkflow("timer_demo", None, json.dumps({"seconds": 60})),
    )
    rig.broker.produce(rig.topics.commands, value=codec.encode(env), key=b"wf-late")
    rig.orch.step()
    events = rig.events("wf-late")
    timers = [e for e in events if isinstance(e.payload, TimerScheduled)]
    assert len(timers) == 1
    decided = timers[0].recorded_at
    assert decided >= written + 600_000
    assert timers[0].payload.fire_at == decided + 60_000
