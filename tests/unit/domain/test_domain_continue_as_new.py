"""continue_as_new: a long-lived run restarts with fresh state, the stream stays contiguous."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import (
    Decider,
    DefinitionError,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    WorkflowState,
)
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.lifecycle import command_handlers as decide_module
from orchestrator.domain.lifecycle.run_starts import continued_run_id
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowNeedsAttention,
    WorkflowStarted,
)

T0 = 1_700_000_000_000
EVERY = 3


class Total(BaseModel):
    total: int = 0


def _received(ctx: Any) -> int:
    return len(ctx.signals.get("add", []))


def _carry(ctx: Any) -> dict[str, int]:
    return {"total": ctx.input.total + sum(p["n"] for p in ctx.signals["add"])}


counter = WorkflowDefinition(
    "counter",
    1,
    Total,
    [
        State(
            "listen",
            wait=SignalWait("add"),
            transitions=[Transition("listen", when=lambda ctx: _received(ctx) < EVERY)],
            continue_as_new=_carry,
        )
    ],
)


class Harness:
    def __init__(self, definition: WorkflowDefinition = counter) -> None:
        self.d = Decider([definition])
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0

    def send(self, payload: Any, mid: str | None = None) -> list[Any]:
        self.n += 1
        at = T0 + self.n
        env: Envelope[Any] = Envelope(
            mid or f"cmd-{self.n}", "wf-1", "", 0, type(payload).__name__, at, payload
        )
        self.state, events = self.d.handle(self.state, env, now_ms=at)
        self.history.extend(events)
        return [e.payload for e in events]


def started(definition: WorkflowDefinition = counter) -> Harness:
    h = Harness(definition)
    h.send(StartWorkflow(definition.name, None, "{}"), mid="run-1")
    return h


def test_the_run_continues_as_new_every_n_signals_with_the_carried_state() -> None:
    h = started()
    h.send(SignalWorkflow("add", '{"n": 1}'))
    h.send(SignalWorkflow("add", '{"n": 2}'))
    events = h.send(SignalWorkflow("add", '{"n": 3}'))
    new_run = continued_run_id("wf-1", "run-1", 8)
    assert events == [
        SignalReceived("add", '{"n": 3}'),
        WorkflowContinuedAsNew(new_run, '{"total":6}'),
        StateEntered("listen", 1),
    ]
    assert [(e.seq, e.run_id) for e in h.history[-3:]] == [
        (7, "run-1"),
        (8, "run-1"),  # the old run ends with it
        (9, new_run),
    ]
    assert h.history[-1].message_id == f"{new_run}/9"
    s = h.state
    assert s is not None and s.run_id == new_run and s.input_json == '{"total":6}'
    assert (s.seq, s.run_base_seq, s.signals, s.visits) == (9, 8, {}, {"listen": 1})


def test_a_signal_loop_keeps_its_state_bounded_and_its_stream_contiguous() -> None:
    h = started()
    sizes = []
    for i in range(1, 31):
        h.send(SignalWorkflow("add", json.dumps({"n": i})))
        assert h.state is not None
        sizes.append((len(h.state.signals.get("add", ())), h.state.seq - h.state.run_base_seq))
    assert max(s for s, _ in sizes) < EVERY
    assert max(n for _, n in sizes) <= 2 * EVERY + 2  # events since the run began
    seqs = [e.seq for e in h.history]
    assert seqs == list(range(1, len(h.history) + 1))  # never a second seq 1
    assert sum(isinstance(e.payload, WorkflowStarted) for e in h.history) == 1
    runs = [
        e.payload.new_run_id for e in h.history if isinstance(e.payload, WorkflowContinuedAsNew)
    ]
    assert len(runs) == 10 and len(set(runs)) == 10
    assert h.state is not None and h.state.input_json == json.dumps(
        {"total": sum(range(1, 31))}, separators=(",", ":")
    )
    folded = h.d.fold(h.history)
    assert folded is not None and folded.to_dict() == h.state.to_dict()
    assert WorkflowState.from_json(h.state.to_json()).to_dict() == h.state.to_dict()


def test_a_redelivered_signal_after_the_continuation_writes_nothing() -> None:
    h = started()
    for i in range(EVERY):
        h.send(SignalWorkflow("add", '{"n": 1}'), mid=f"sig-{i}")
    assert isinstance(h.history[-2].payload, WorkflowContinuedAsNew)
    assert h.send(SignalWorkflow("add", '{"n": 1}'), mid="sig-2") == []


def test_the_history_limit_counts_events_since_the_run_began(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decide_module, "MAX_HISTORY_EVENTS", 2 * EVERY + 2)
    h = started()
    for i in range(4 * EVERY):  # far more events than the limit, across four runs
        h.send(SignalWorkflow("add", json.dumps({"n": i})))
    assert h.state is not None and h.state.attention_reason is None
    assert h.state.seq > 3 * (2 * EVERY + 2)

    never = WorkflowDefinition(
        "never",
        1,
        Total,
        [State("listen", wait=SignalWait("add"), transitions=[Transition("listen")])],
    )
    h = started(never)
    for i in range(EVERY + 1):  # 2 + 2 per signal: the fourth signal passes the limit
        h.send(SignalWorkflow("add", json.dumps({"n": i})))
    assert isinstance(h.history[-1].payload, WorkflowNeedsAttention)
    assert h.history[-1].seq == 2 * EVERY + 3


def test_summarize_of_a_finished_continued_run_equals_the_fold() -> None:
    stop = WorkflowDefinition(
        "stop",
        1,
        Total,
        [
            State(
                "listen",
                wait=SignalWait("add"),
                transitions=[Transition("end", when=lambda ctx: ctx.input.total > 5)],
                continue_as_new=_carry,
            ),
            State("end", complete=lambda ctx: {"total": ctx.input.total}),
        ],
    )
    h = started(stop)
    for i in range(1, 5):  # totals 1, 3, 6: the fourth run ends
        h.send(SignalWorkflow("add", json.dumps({"n": i})))
    assert h.state is not None and h.state.is_terminal
    full = h.d.fold(h.history)
    assert full is not None
    assert h.d.summarize(None, h.history) == full.summary()


def test_an_invalid_next_input_fails_the_run_with_the_reason() -> None:
    bad = WorkflowDefinition(
        "bad",
        1,
        Total,
        [State("listen", wait=SignalWait("add"), continue_as_new=lambda ctx: {"total": "x"})],
    )
    h = started(bad)
    events = h.send(SignalWorkflow("add", "{}"))
    assert isinstance(events[-1], WorkflowFailed)
    assert events[-1].reason.startswith("state 'listen': continue_as_new input: invalid input")


def test_continue_as_new_is_a_terminal_outcome_exclusive_of_the_others() -> None:
    with pytest.raises(DefinitionError, match="more than one of complete=, fail= and continue"):
        WorkflowDefinition(
            "both",
            1,
            Total,
            [State("s", complete=lambda ctx: {}, continue_as_new=lambda ctx: {})],
        )


class Month(BaseModel):
    month: int = 1


billing = WorkflowDefinition(
    "billing",
    1,
    Month,
    [
        State(
            "charge",
            steps=[Step("charge", "charge_card")],
            transitions=[Transition("done", when=lambda ctx: ctx.input.month >= 3)],
            continue_as_new=lambda ctx: {"month": ctx.input.month + 1},
        ),
        State("done", complete=lambda ctx: {"months": ctx.input.month}),
    ],
)


def test_a_continued_run_never_reuses_an_idempotency_key_of_an_earlier_run() -> None:
    """Month 2 must not be answered with month 1's charge (issue 29, item 1)."""
    h = started(billing)
    for month in (1, 2, 3):
        sent = [p for p in h.history[-2:] if isinstance(p.payload, ActivityScheduled)]
        assert len(sent) == 1, month
        h.send(CompleteActivity(sent[0].payload.activity_id, 1, json.dumps({"month": month})))
    keys = [
        e.payload.idempotency_key for e in h.history if isinstance(e.payload, ActivityScheduled)
    ]
    assert keys == ["wf-1/charge_card/1", "wf-1/charge_card/2", "wf-1/charge_card/3"]
    assert h.state is not None and h.state.status == "completed"
    assert check_history(h.history) == []
    # the counters survive a fold from the log and a snapshot round trip
    folded = h.d.fold(h.history)
    assert folded.logical_attempts == {"charge_card": 3}
    assert WorkflowState.from_dict(folded.to_dict()).logical_attempts == {"charge_card": 3}
