"""The replay check (orchestrator.domain.history.replay) on histories made by the real decider.

An in-memory stand-in for the orchestrator decides each command the way the runtime does:
at its own clock ``now``, later than the command's (the runtime sets the command's
``recorded_at`` to ``now``). With ``legacy=True`` it decides at the client's clock, as the
orchestrator did before, so histories recorded then still replay (clock inferred).
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import pytest

from orchestrator.client.history_io import envelope_from_dict, envelope_to_dict, write_history
from orchestrator.domain.authoring.definitions import TimerWait, Transition, WorkflowDefinition
from orchestrator.domain.history import replay
from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    FireTimer,
    SignalWorkflow,
    StartWorkflow,
)
from orchestrator.examples import document_review, timer_demo

T0 = 1_750_000_000_000
LAG_MS = 37  # how long each command waits in Kafka before it is decided


class Sim:
    """Decides commands like the orchestrator; keeps every event and command."""

    def __init__(self, decider: Decider, wf: str = "wf-1", legacy: bool = False) -> None:
        self.decider, self.wf, self.clock, self.n = decider, wf, T0, 0
        self.legacy = legacy
        self.state: Any = None
        self.events: list[Envelope[Any]] = []
        self.commands: list[Envelope[Any]] = []

    def send(self, payload: Any, at: int | None = None) -> list[Envelope[Any]]:
        self.n += 1
        self.clock = at if at is not None else self.clock + 1000
        cmd: Envelope[Any] = Envelope(
            f"cmd-{self.n}",
            self.wf,
            "",
            0,
            type(payload).__name__,
            self.clock,
            payload,
            correlation_id=self.wf,
        )
        now = self.clock if isinstance(payload, FireTimer) else self.clock + LAG_MS
        taken = cmd if self.legacy else dataclasses.replace(cmd, recorded_at=now)
        self.state, envs = self.decider.handle(self.state, taken, now)
        self.events += envs
        if not isinstance(payload, FireTimer):
            self.commands.append(cmd)
        return envs

    def fire(self, timer_id: str) -> list[Envelope[Any]]:
        at = self.state.timers[timer_id].fire_at
        return self.send(FireTimer(timer_id), at)

    def complete(self, result: dict[str, Any]) -> list[Envelope[Any]]:
        sched = [e for e in self.events if isinstance(e.payload, ActivityScheduled)][-1]
        p = sched.payload
        return self.send(CompleteActivity(p.activity_id, p.attempt, json.dumps(result)))


def review_run(decider: Decider, wf: str = "wf-1", legacy: bool = False) -> Sim:
    """document_review: needs documents, a signal adds one, then approved."""
    sim = Sim(decider, wf, legacy)
    sim.send(StartWorkflow("document_review", 1, json.dumps({"document": "a"})))
    sim.complete({"decision": "needs_documents", "documents": 1})
    sim.send(SignalWorkflow("documents_added", json.dumps({"document": "b"})))
    sim.complete({"decision": "approved", "documents": 2})
    assert sim.state.status == "completed"
    return sim


def edited_review(threshold: int) -> WorkflowDefinition:
    """document_review v1 with its first guard edited in place (same name and version)."""
    states = list(document_review.states.values())
    review = states[0]
    guard = Transition("approved", when=lambda ctx: ctx.results["review"]["documents"] >= threshold)
    states[0] = dataclasses.replace(review, transitions=(guard, *review.transitions[1:]))
    return WorkflowDefinition(
        "document_review",
        1,
        document_review.input_model,
        states,
        output_model=document_review.output_model,
    )


DECIDER = Decider([document_review, timer_demo])


def test_a_run_replays_identically_with_its_commands() -> None:
    sim = review_run(DECIDER)
    (report,) = replay.replay_history(DECIDER, sim.events + sim.commands)
    assert report.ok, report.divergence
    assert (report.name, report.version, report.events) == ("document_review", 1, len(sim.events))
    assert report.redecided == report.groups == 4
    assert (report.folded_only, report.clock_inferred, report.digest_changed) == (0, 0, False)


def test_a_run_replays_exactly_from_its_events_alone() -> None:
    sim = review_run(DECIDER)
    (report,) = replay.replay_history(DECIDER, sim.events)
    assert report.ok, report.divergence
    assert (report.redecided, report.folded_only, report.clock_inferred) == (4, 0, 0)


def test_a_legacy_history_without_commands_infers_the_command_clock_from_timers() -> None:
    sim = review_run(DECIDER, legacy=True)
    (report,) = replay.replay_history(DECIDER, sim.events)
    assert report.ok, report.divergence
    # the completion that arms the 7-day signal timeout was decided LAG_MS after it was sent
    assert report.clock_inferred == 1
    assert report.redecided == 4


def test_a_legacy_history_with_commands_replays_at_their_own_clock() -> None:
    sim = review_run(DECIDER, legacy=True)
    (report,) = replay.replay_history(DECIDER, sim.events + sim.commands)
    assert report.ok, report.divergence
    assert (report.redecided, report.clock_inferred) == (4, 1)


def test_an_in_place_guard_edit_names_the_first_diverging_event_and_the_digest() -> None:
    sim = review_run(DECIDER)
    edited = Decider([edited_review(threshold=1), timer_demo])
    (report,) = replay.replay_history(edited, sim.events + sim.commands)
    assert not report.ok
    assert report.digest_changed
    assert report.recorded_digest == document_review.digest != report.current_digest
    d = report.divergence
    assert d is not None and d.command == "CompleteActivity"
    # seq 1 started, 2 entered review, 3 scheduled, 4 completed, 5 entered the next state
    assert d.seq == 5
    assert d.expected == {"type": "StateEntered", "state": "needs_documents", "visit": 1}
    assert d.got == {"type": "StateEntered", "state": "approved", "visit": 1}


def test_an_edit_that_keeps_these_decisions_only_flags_the_digest() -> None:
    sim = review_run(DECIDER)
    edited = Decider([edited_review(threshold=2), timer_demo])
    (report,) = replay.replay_history(edited, sim.events + sim.commands)
    assert report.ok and report.digest_changed


@pytest.mark.parametrize("legacy", [False, True])
def test_a_changed_timer_duration_is_not_taken_for_a_late_command(legacy: bool) -> None:
    sim = Sim(DECIDER, legacy=legacy)
    sim.send(StartWorkflow("timer_demo", 1, json.dumps({"seconds": 30})))
    sim.fire("sleep#1/wait")
    assert sim.state.status == "completed"
    states = list(timer_demo.states.values())

    longer = dataclasses.replace(states[0], wait=TimerWait(lambda ctx: 3600.0))
    edited = WorkflowDefinition("timer_demo", 1, timer_demo.input_model, [longer])
    (report,) = replay.replay_history(Decider([document_review, edited]), sim.events)
    d = report.divergence
    assert d is not None and d.seq == 3 and d.command == "StartWorkflow"
    assert d.expected is not None and d.got is not None
    # re-decided at the events' clock; a legacy history was decided LAG_MS earlier
    lag = LAG_MS if legacy else 0
    assert d.got["fire_at"] - d.expected["fire_at"] == 3_570_000 + lag


def test_a_run_of_a_version_the_code_lacks_diverges_at_once() -> None:
    sim = review_run(DECIDER)
    (report,) = replay.replay_history(Decider([timer_demo]), sim.events)
    d = report.divergence
    assert d is not None and d.seq == 1 and d.got is None
    assert "unknown workflow 'document_review'" in d.note
    assert report.current_digest == "" and not report.digest_changed


def test_a_group_without_a_rebuildable_command_is_folded(monkeypatch) -> None:
    sim = review_run(DECIDER)
    table = {k: v for k, v in replay.COMMAND_FROM_EVENT.items() if v is not SignalWorkflow}
    monkeypatch.setattr(replay, "COMMAND_FROM_EVENT", table)
    (report,) = replay.replay_history(DECIDER, sim.events)
    assert report.ok
    assert (report.folded_only, report.folded_types) == (1, ["SignalReceived"])


def test_a_history_that_no_longer_folds_is_a_divergence(monkeypatch) -> None:
    sim = review_run(DECIDER)
    table = {k: v for k, v in replay.COMMAND_FROM_EVENT.items() if v is not SignalWorkflow}
    monkeypatch.setattr(replay, "COMMAND_FROM_EVENT", table)
    renamed = dataclasses.replace(
        list(document_review.states.values())[1], name="waiting_for_documents"
    )
    states = list(document_review.states.values())
    states[1] = renamed
    states[0] = dataclasses.replace(
        states[0], transitions=(*states[0].transitions[:2], Transition("waiting_for_documents"))
    )
    edited = WorkflowDefinition(
        "document_review",
        1,
        document_review.input_model,
        states,
        output_model=document_review.output_model,
    )
    (report,) = replay.replay_history(Decider([edited]), sim.events)
    assert report.divergence is not None and report.divergence.seq == 5


def test_runs_are_reported_one_by_one() -> None:
    a, b = review_run(DECIDER, "wf-a"), review_run(DECIDER, "wf-b")
    reports = replay.replay_history(DECIDER, [*a.events, *b.events, *a.events[:3]])
    assert [(r.workflow_id, r.ok) for r in reports] == [("wf-a", True), ("wf-b", True)]


def test_two_events_at_one_seq_are_refused() -> None:
    a = review_run(DECIDER)
    forged = dataclasses.replace(a.events[2], message_id="other")
    with pytest.raises(replay.HistoryError, match="two different events at seq 3"):
        replay.replay_history(DECIDER, [*a.events, forged])


def test_history_lines_round_trip() -> None:
    sim = review_run(DECIDER)
    buf = io.StringIO()
    assert write_history(sim.events + sim.commands, buf) == len(sim.events) + len(sim.commands)
    back = [envelope_from_dict(json.loads(line)) for line in buf.getvalue().splitlines()]
    assert back == sim.events + sim.commands
    assert envelope_to_dict(back[0])["payload"]["name"] == "document_review"
