"""A refused command is no dead letter: a live run records it, and a redelivery writes nothing
(docs/activities.md, "Dead letters")."""

from __future__ import annotations

from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.messages import CommandRefused, SignalWorkflow
from tests.unit.memory_rig import MemoryRig, codec


def _refusals(rig: MemoryRig, wf: str) -> list:
    return [e for e in rig.events(wf) if isinstance(e.payload, CommandRefused)]


def test_a_signal_the_live_run_does_not_wait_for_is_recorded_in_its_history(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("waiting", "document_review", {"document": "a"})
    rig.run()
    rig.send("waiting", SignalWorkflow("nobody_waits_for_this", "{}"), "sig-1")
    rig.run()
    [refused] = _refusals(rig, "waiting")
    assert refused.causation_id == "sig-1"
    assert refused.payload.command == "SignalWorkflow"
    assert refused.payload.what == "signal 'nobody_waits_for_this'"
    assert "does not wait for signal 'nobody_waits_for_this'" in refused.payload.reason
    assert rig.letters() == []
    assert rig.orch.ctx.stats.refused == 1

    rig.send("waiting", SignalWorkflow("nobody_waits_for_this", "{}"), "sig-1")  # redelivered
    rig.run()
    assert len(_refusals(rig, "waiting")) == 1
    assert rig.letters() == []
    assert check_history(rig.events("waiting")) == []

    rig.signal("waiting", "documents_added", {"document": "b"})  # the run goes on
    rig.run()
    assert rig.letters() == []
    assert check_history(rig.events("waiting")) == []


def test_a_command_for_a_finished_or_unknown_run_writes_nothing_anywhere(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("done", "three_step", {"n": 1})
    rig.run()
    before = len(rig.events("done"))
    rig.signal("done", "late", {})
    rig.signal("nobody", "documents_added", {})
    rig.run()
    assert len(rig.events("done")) == before
    assert rig.events("nobody") == []
    assert rig.letters() == []
    assert rig.orch.ctx.stats.refused == 2


def test_a_refused_start_is_kept_in_the_dlq_since_no_run_holds_it(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("nameless", "no_such_workflow", {})
    rig.run()
    [letter] = rig.letters()
    assert letter.payload.reason.startswith("rejected: ")
    assert rig.events("nameless") == []


def test_a_refusal_that_names_another_command_breaks_the_refusal_rule(tmp_path):
    from dataclasses import replace

    from orchestrator.domain.history.invariants import Invariant

    rig = MemoryRig(tmp_path)
    rig.start("waiting", "document_review", {"document": "a"})
    rig.run()
    rig.send("waiting", SignalWorkflow("nobody_waits_for_this", "{}"), "sig-1")
    rig.run()
    events = rig.events("waiting")
    i = next(i for i, e in enumerate(events) if isinstance(e.payload, CommandRefused))
    events[i] = replace(events[i], causation_id="sig-2")
    [violation] = check_history(events)
    assert violation.rule == Invariant.REFUSAL
    assert "names command 'sig-1', caused by 'sig-2'" in violation.message


def test_a_recorded_refusal_replays_as_the_same_refusal(tmp_path):
    from orchestrator.domain.history.replay import replay_history

    rig = MemoryRig(tmp_path)
    rig.start("waiting", "document_review", {"document": "a"})
    rig.run()
    rig.send("waiting", SignalWorkflow("nobody_waits_for_this", "{}"), "sig-1")
    rig.run()
    commands = [
        e
        for e in (codec.decode(r.value) for r in rig.broker.records(rig.topics.commands))
        if e.workflow_id == "waiting"
    ]
    decider = rig.orch.ctx.decider
    [report] = replay_history(decider, [*commands, *rig.events("waiting")])
    assert report.ok, report.divergence
    assert report.folded_only == 0
