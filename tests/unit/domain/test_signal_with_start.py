"""Signal-with-start on exact event sequences (docs/workflows.md, "Signal-with-start").

One command: the workflow has no run -> a run starts and the signal is delivered in the
same decision; it has one -> only the signal; a redelivery writes nothing; a run of
another workflow, an unknown signal or a finished run refuse it with the reason and
write nothing; a history of both replays identically without its commands.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import CommandRejected, Decider, WorkflowState
from orchestrator.domain.authoring.definitions import (
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.history.replay import replay_history
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    SignalReceived,
    SignalWithStart,
    StartWorkflow,
    StateEntered,
    WorkflowCompleted,
    WorkflowStarted,
)

T0 = 1_700_000_000_000


class Order(BaseModel):
    order: str


def _payments(ctx: Any) -> dict[str, Any]:
    return {"order": ctx.input.order, "payments": ctx.signals["paid"]}


#: Checks the order first (a step), then waits for two payments; each payment webhook is a
#: signal-with-start, so the first one starts the run.
orders = WorkflowDefinition(
    "orders",
    1,
    Order,
    [
        State("check", steps=[Step("check", "check")], transitions=[Transition("wait")]),
        State(
            "wait",
            wait=SignalWait("paid"),
            transitions=[
                Transition("done", when=lambda ctx: len(ctx.signals["paid"]) >= 2),
                Transition("wait"),  # until two payments are in
            ],
        ),
        State("done", complete=_payments),
    ],
    initial="check",
)
other = WorkflowDefinition("other", 1, Order, [State("run", complete=lambda ctx: {})])
DECIDER = Decider([orders, other])


class Harness:
    def __init__(self) -> None:
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0

    def send(self, payload: Any, mid: str | None = None) -> list[Any]:
        self.n += 1
        env = Envelope(
            mid or f"cmd-{self.n}", "o-1", "", 0, type(payload).__name__, T0 + self.n, payload
        )
        self.state, events = DECIDER.handle(self.state, env, now_ms=T0 + self.n)
        self.history.extend(events)
        return [e.payload for e in events]


def paid(amount: int, name: str = "orders") -> SignalWithStart:
    return SignalWithStart(name, '{"order":"A-1"}', "paid", json.dumps({"amount": amount}))


def test_the_first_starts_the_run_and_delivers_the_signal_the_next_only_signal() -> None:
    h = Harness()
    events = h.send(paid(10), mid="webhook-1")
    assert events[:3] == [
        WorkflowStarted("orders", 1, orders.digest, '{"order":"A-1"}', 0),
        StateEntered("check", 1),
        SignalReceived("paid", '{"amount": 10}'),
    ]
    assert isinstance(events[3], ActivityScheduled)
    assert h.history[0].run_id == "webhook-1"  # a run's id is its starting command's
    assert h.send(paid(10), mid="webhook-1") == []  # a redelivery writes nothing
    events = h.send(paid(20), mid="webhook-2")
    assert events == [SignalReceived("paid", '{"amount": 20}')]
    events = h.send(CompleteActivity("check#1/check", 1, "{}"))
    assert events[-1] == WorkflowCompleted(
        '{"order":"A-1","payments":[{"amount":10},{"amount":20}]}'
    )
    assert check_history(h.history) == []
    # replayed without its commands: the start + signal group is rebuilt as one command
    (report,) = replay_history(DECIDER, h.history)
    assert report.ok and report.folded_only == 0 and report.redecided == report.groups


def test_a_start_of_the_same_id_after_it_changes_nothing_and_the_signal_is_kept() -> None:
    h = Harness()
    h.send(paid(10))
    assert h.send(StartWorkflow("orders", 1, '{"order":"A-1"}')) == []
    assert h.state is not None and h.state.signals == {"paid": ('{"amount": 10}',)}


@pytest.mark.parametrize(
    ("before", "command", "message"),
    [
        (
            [paid(10)],
            paid(10, name="other"),
            "workflow 'o-1' runs 'orders', not 'other'; signal-with-start of signal 'paid' refused",
        ),
        (
            [],
            SignalWithStart("orders", '{"order":"A-1"}', "shipped", "{}"),
            "workflow 'o-1' (orders v1) does not wait for signal 'shipped'; known signals: paid",
        ),
        (
            [StartWorkflow("other", 1, '{"order":"A-1"}')],
            paid(10, name="other"),
            "workflow 'o-1' is completed; signal 'paid' refused",
        ),
        (
            [],
            SignalWithStart("orders", '{"order": 5}', "paid", "{}"),
            None,
        ),
    ],
)
def test_what_cannot_be_done_is_refused_and_writes_nothing(
    before: list[Any], command: SignalWithStart, message: str | None
) -> None:
    h = Harness()
    for payload in before:
        h.send(payload)
    written, state = len(h.history), h.state
    with pytest.raises(CommandRejected) as exc:
        h.send(command)
    if message is not None:
        assert str(exc.value) == message
    else:  # the start's own check of the input
        assert "order" in str(exc.value) and "valid string" in str(exc.value)
    assert len(h.history) == written and h.state is state
