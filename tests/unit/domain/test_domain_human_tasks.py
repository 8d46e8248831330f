"""Human tasks in the pure domain: opening, reminders, escalations, expiry and decisions.

Every check runs on the decider's exact events and refusal messages; the clock is the
commands' ``recorded_at`` (three days of workflow time pass without any real wait).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib
import json
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import (
    CommandRejected,
    Decider,
    DefinitionError,
    Escalation,
    HumanTask,
    HumanTaskStatus,
    OnExpiry,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    WorkflowState,
    operation_digest,
    sha256_hex,
    task_id_for,
    token_hash,
)
from orchestrator.domain.authoring.waits import SignalWait
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompleteActivity,
    DecideHumanTask,
    Envelope,
    FireTimer,
    HumanTaskDecided,
    HumanTaskEscalated,
    HumanTaskExpired,
    HumanTaskOpened,
    HumanTaskReminded,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerFired,
    TimerScheduled,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
)
from orchestrator.examples import app

T0 = 1_700_000_000_000
HOUR = 3600 * 1000
DAY = 24 * HOUR
SECRET = b"runtime-secret-never-in-the-domain"


def issue_token(task_id: str) -> str:
    """What a runtime does: the token is HMAC(secret, task id); only its hash is recorded."""
    return hmac.new(SECRET, task_id.encode(), hashlib.sha256).hexdigest()


def token_hasher(task_id: str) -> str:
    return token_hash(issue_token(task_id))


class Pay(BaseModel):
    amount: int
    account: str = "acc-1"


def operation(ctx: Any) -> dict[str, Any]:
    amount = ctx.input_dict["amount"] + sum(p["extra"] for p in ctx.signals.get("bump", []))
    return {"resource": "payments.pay", "arguments": {"amount": amount, "account": "acc-1"}}


def approval(**overrides: Any) -> WorkflowDefinition:
    task: dict[str, Any] = {
        "role": "approver",
        "owner": lambda ctx: "owner-" + ctx.input.account,
        "operation": operation,
        "evidence": lambda ctx: {"amount": ctx.input_dict["amount"]},
        "due": timedelta(days=1),
        "reminders": [timedelta(hours=4), timedelta(hours=20)],
        "escalations": [
            Escalation(timedelta(days=1), owner="lead", role="lead"),
            Escalation(timedelta(days=2), owner="cfo"),
        ],
        "expires": timedelta(days=3),
        "on_approve": "pay",
        "on_reject": "rejected",
    }
    task.update(overrides)
    return WorkflowDefinition(
        "approval",
        1,
        Pay,
        [
            State("ask", wait=HumanTask("approve", **task)),
            State("pay", steps=[Step("pay", "pay")], complete=lambda ctx: {"paid": True}),
            State("rejected", complete=lambda ctx: {"paid": False}),
            State("review", wait=SignalWait("bump"), transitions=[Transition("ask")]),
        ],
    )


class Harness:
    def __init__(self, definition: WorkflowDefinition, hasher: Any = token_hasher) -> None:
        self.d = Decider([definition], task_token_hash=hasher)
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0

    def send(self, payload: Any, at: int, mid: str | None = None) -> list[Any]:
        self.n += 1
        env: Envelope[Any] = Envelope(
            mid or f"cmd-{self.n}", "wf-1", "", 0, type(payload).__name__, at, payload
        )
        self.state, events = self.d.handle(self.state, env, now_ms=at)
        self.history.extend(events)
        return [e.payload for e in events]

    def fire_due(self, until: int) -> list[Any]:
        """Fire every armed timer due by ``until``, in order, as the runtime would."""
        out: list[Any] = []
        while self.state is not None and not self.state.is_terminal:
            due = [(tid, at) for tid, at in self.state.pending_timers() if at <= until]
            if not due:
                break
            tid, at = due[0]
            out += self.send(FireTimer(tid), at=at, mid=f"fire-{tid}")
        return out

    @property
    def task(self) -> HumanTaskOpened:
        return next(e.payload for e in self.history if isinstance(e.payload, HumanTaskOpened))

    def decide(self, decision: str, at: int, mid: str | None = None, **kw: Any) -> list[Any]:
        fields: dict[str, Any] = {
            "task_id": "",
            "token_hash": token_hash(issue_token(self.task.task_id)),
            "decision": decision,
            "actor": "alice",
            "actor_roles_json": '["approver"]',
            "reason": "looks right",
            "operation_digest": self.task.operation_digest,
        }
        fields.update(kw)
        return self.send(DecideHumanTask(**fields), at=at, mid=mid)


def started(definition: WorkflowDefinition | None = None, amount: int = 100) -> Harness:
    h = Harness(definition or approval())
    h.send(StartWorkflow("approval", None, json.dumps({"amount": amount})), at=T0, mid="run-1")
    return h


# -- opening ---------------------------------------------------------------------------------


def test_opening_records_the_task_with_digests_and_only_the_token_hash() -> None:
    h = started()
    task_id = task_id_for("wf-1", "run-1", "ask", 1)
    args_digest = sha256_hex('{"account":"acc-1","amount":100}')
    assert h.task == HumanTaskOpened(
        task_id=task_id,
        task_name="approve",
        owner="owner-acc-1",
        role="approver",
        evidence_json='{"amount":100}',
        evidence_digest=sha256_hex('{"amount":100}'),
        resource="payments.pay",
        arguments_digest=args_digest,
        schema_version=1,
        policy_version="1",
        operation_digest=operation_digest("payments.pay", args_digest, 1, "1"),
        due_at=T0 + DAY,
        expires_at=T0 + 3 * DAY,
        token_hash=hashlib.sha256(issue_token(task_id).encode()).hexdigest(),
    )
    timers = [e.payload for e in h.history if isinstance(e.payload, TimerScheduled)]
    assert [(t.timer_id, t.fire_at - T0, t.purpose) for t in timers] == [
        ("ask#1/remind/1", 4 * HOUR, "human:remind:1"),
        ("ask#1/remind/2", 20 * HOUR, "human:remind:2"),
        ("ask#1/escalate/1", DAY, "human:escalate:1"),
        ("ask#1/escalate/2", 2 * DAY, "human:escalate:2"),
        ("ask#1/expire/0", 3 * DAY, "human:expire:0"),
    ]
    assert h.state is not None and h.state.status == "waiting"
    assert issue_token(task_id) not in repr(h.history)  # the token itself is nowhere


def test_without_a_token_function_the_task_records_no_token_and_is_decided_by_id() -> None:
    h = Harness(approval(), hasher=None)
    h.send(StartWorkflow("approval", None, '{"amount": 5}'), at=T0, mid="run-1")
    assert h.task.token_hash == ""
    with pytest.raises(CommandRejected, match="no human task of workflow 'wf-1' has this token"):
        h.decide("approve", T0 + 1)
    events = h.decide("approve", T0 + 1, task_id=h.task.task_id, token_hash="")
    assert [type(e) for e in events] == [HumanTaskDecided, StateEntered, ActivityScheduled]


# -- reminders, escalations, expiry (3 days of workflow time) ---------------------------------


def test_reminders_and_escalations_on_schedule_then_expiry_rejects() -> None:
    h = started()
    tid = h.task.task_id
    events = h.fire_due(T0 + 3 * DAY)
    kinds = [e for e in events if not isinstance(e, TimerFired)]
    assert kinds == [
        HumanTaskReminded(tid, 1, "owner-acc-1"),
        HumanTaskReminded(tid, 2, "owner-acc-1"),
        HumanTaskEscalated(tid, 1, "lead", "lead"),
        HumanTaskEscalated(tid, 2, "cfo", "lead"),
        HumanTaskExpired(tid, "reject"),
        StateEntered("rejected", 1),
        WorkflowCompleted('{"paid":false}'),
    ]
    fired_at = [e.recorded_at for e in h.history if isinstance(e.payload, TimerFired)]
    assert [t - T0 for t in fired_at] == [4 * HOUR, 20 * HOUR, DAY, 2 * DAY, 3 * DAY]
    assert not any(isinstance(e.payload, HumanTaskDecided) for e in h.history)
    task = h.state.human_tasks[tid] if h.state else None
    assert task is not None and task.status == HumanTaskStatus.EXPIRED


def test_expiry_without_a_reject_path_fails_the_run_and_cancel_cancels_it() -> None:
    h = started(approval(on_reject=None))
    assert h.fire_due(T0 + 3 * DAY)[-1] == WorkflowFailed(
        "state 'ask': human task 'approve' expired without a decision"
    )
    h = started(approval(on_expiry=OnExpiry.CANCEL))
    assert h.fire_due(T0 + 3 * DAY)[-1] == WorkflowCancelled(
        "human task 'approve' expired without a decision"
    )
    h = started(approval(on_expiry="review"))
    assert h.fire_due(T0 + 3 * DAY)[-2:] == [
        HumanTaskExpired(h.task.task_id, "review"),
        StateEntered("review", 1),
    ]


def test_approval_after_three_days_of_workflow_time_resumes_the_workflow() -> None:
    h = started(approval(expires=timedelta(days=4)))
    h.fire_due(T0 + 3 * DAY)
    at = T0 + 3 * DAY + 1
    events = h.decide("approve", at, actor="lee", actor_roles_json='["lead"]')
    assert events[0] == HumanTaskDecided(
        task_id=h.task.task_id,
        decision="approve",
        actor="lee",
        reason_digest=sha256_hex("looks right"),
        evidence_digest=h.task.evidence_digest,
        operation_digest=h.task.operation_digest,
        decided_at=at,
    )
    assert events[1:] == [StateEntered("pay", 1), events[2]]
    assert isinstance(events[2], ActivityScheduled)
    assert h.state is not None and h.state.timers == {}  # the expiry can no longer fire
    aid = events[2].activity_id
    assert h.send(CompleteActivity(aid, 1, "{}"), at=at + 1)[1:] == [
        WorkflowCompleted('{"paid":true}')
    ]
    assert "looks right" not in repr(h.history)  # only the reason's digest is recorded


# -- decisions checked again at decision time -------------------------------------------------


def test_a_late_decision_is_refused_by_the_decision_clock_even_before_the_expiry_fires() -> None:
    h = started()
    with pytest.raises(
        CommandRejected,
        match=r"expired at \d{4}-\d\d-\d\dT[\d:.]+Z \(decision time \d{4}-\d\d-\d\dT[\d:.]+Z\)",
    ):
        h.decide("approve", T0 + 3 * DAY)
    h.fire_due(T0 + 3 * DAY)
    with pytest.raises(
        CommandRejected, match=r"expired at \d{4}-[\d:.T-]+Z \(reject\)|is completed"
    ):
        h.decide("approve", T0 + 3 * DAY + 1)


def test_wrong_or_guessed_tokens_are_refused() -> None:
    h = started()
    with pytest.raises(CommandRejected, match="no human task of workflow 'wf-1' has this token"):
        h.decide("approve", T0 + 1, token_hash=token_hash("guess"))
    with pytest.raises(CommandRejected, match="the token does not match human task"):
        h.decide("approve", T0 + 1, task_id=h.task.task_id, token_hash=token_hash("guess"))
    with pytest.raises(CommandRejected, match="has no human task 'nope'"):
        h.decide("approve", T0 + 1, task_id="nope")
    with pytest.raises(CommandRejected, match="names a task id or a token"):
        h.decide("approve", T0 + 1, token_hash="")


def test_unqualified_actor_is_refused_and_escalation_widens_the_roles() -> None:
    h = started()
    msg = "actor 'bob' holds none of the roles that may decide human task '.*' \\(approver\\)"
    with pytest.raises(CommandRejected, match=msg):
        h.decide("approve", T0 + 1, actor="bob", actor_roles_json='["viewer"]')
    with pytest.raises(CommandRejected, match="actor roles must be a JSON array of names"):
        h.decide("approve", T0 + 1, actor="bob", actor_roles_json='"approver"')
    with pytest.raises(CommandRejected, match="names its actor"):
        h.decide("approve", T0 + 1, actor="")
    with pytest.raises(CommandRejected, match="approver\\)"):
        h.decide("approve", T0 + 1, actor="lee", actor_roles_json='["lead"]')
    h.fire_due(T0 + DAY)  # escalated to the lead
    events = h.decide("reject", T0 + DAY + 1, actor="lee", actor_roles_json='["lead"]')
    assert events[0].decision == "reject" and events[1:] == [
        StateEntered("rejected", 1),
        WorkflowCompleted('{"paid":false}'),
    ]


def test_a_stale_approval_for_a_changed_operation_is_refused() -> None:
    h = started()
    seen = h.task.operation_digest
    with pytest.raises(CommandRejected, match="stale approval: the approver saw operation"):
        h.decide("approve", T0 + 1, operation_digest="0" * 64)
    # the operation changes while the task is open (a signal arrives in the inbox)
    h.send(SignalWorkflow("bump", '{"extra": 50}'), at=T0 + 2)
    with pytest.raises(CommandRejected, match="changed since it opened"):
        h.decide("approve", T0 + 3, operation_digest=seen)
    # a rejection of what the approver saw is always safe
    assert h.decide("reject", T0 + 4, operation_digest=seen)[0].decision == "reject"


def test_repeated_decision_writes_nothing_and_a_conflicting_one_is_refused() -> None:
    h = started(approval(on_reject="review"))
    first = h.decide("reject", T0 + 1)
    assert first[:2] == [first[0], StateEntered("review", 1)]
    n = len(h.history)
    assert h.decide("reject", T0 + 2) == []  # same actor, same decision: the first result
    assert len(h.history) == n
    with pytest.raises(CommandRejected, match="was already rejected by 'alice'"):
        h.decide("approve", T0 + 3)
    with pytest.raises(CommandRejected, match="was already rejected by 'alice'"):
        h.decide("reject", T0 + 3, actor="carol")


def test_a_redelivered_decision_command_writes_nothing() -> None:
    h = started()
    events = h.decide("approve", T0 + 1, mid="decision-1")
    assert events and h.decide("approve", T0 + 2, mid="decision-1") == []


def test_a_task_of_a_state_left_is_closed_and_refuses_decisions() -> None:
    h = started(approval(on_expiry="review"))
    h.fire_due(T0 + 3 * DAY)  # expired into review, which waits for a signal
    old = h.task
    with pytest.raises(CommandRejected, match=r"expired at \d{4}-[\d:.T-]+Z \(review\)"):
        h.decide("approve", T0 + 3 * DAY + 1)
    h.send(SignalWorkflow("bump", '{"extra": 1}'), at=T0 + 3 * DAY + 2)  # back to ask#2
    opened = [e.payload for e in h.history if isinstance(e.payload, HumanTaskOpened)]
    assert [o.task_id for o in opened] == [old.task_id, task_id_for("wf-1", "run-1", "ask", 2)]
    assert opened[1].token_hash != old.token_hash


def test_a_decision_by_task_id_must_carry_the_token_hash_the_task_recorded() -> None:
    h = started()
    tid = h.task.task_id
    with pytest.raises(CommandRejected, match=f"a decision of human task '{tid}' carries the hash"):
        h.decide("approve", T0 + 1, task_id=tid, token_hash="", actor_roles_json='["lead"]')
    with pytest.raises(CommandRejected, match="the token does not match human task"):
        h.decide("approve", T0 + 1, task_id=tid, token_hash=h.task.token_hash[::-1])
    assert not any(isinstance(e.payload, HumanTaskDecided) for e in h.history)
    assert h.decide("approve", T0 + 1, task_id=tid)[0].actor == "alice"


def test_a_signed_decision_records_its_evidence_and_an_unsigned_one_the_pre_v6_defaults() -> None:
    """The runtime verified the proof (the domain holds no key); the event keeps what the
    proof covers. An unsigned command is one recorded before v6, re-decided by replay."""
    h = started()
    proof = "f" * 64
    (signed, *_) = h.decide("approve", T0 + 1, task_id=h.task.task_id, proof=proof)
    assert isinstance(signed, HumanTaskDecided)
    assert (signed.token_hash, signed.actor_roles_json, signed.proof) == (
        h.task.token_hash, '["approver"]', proof)  # fmt: skip
    assert signed.correction_digest == ""
    h = started()
    (unsigned, *_) = h.decide("approve", T0 + 1)
    assert unsigned == dataclasses.replace(
        signed, token_hash="", actor_roles_json="[]", proof="", task_id=h.task.task_id
    )


def test_a_bad_decision_word_is_refused() -> None:
    h = started()
    with pytest.raises(CommandRejected, match="a decision is 'approve' or 'reject', got 'maybe'"):
        h.decide("maybe", T0 + 1)


def test_a_decision_for_a_finished_run_is_refused() -> None:
    h = started()
    h.fire_due(T0 + 3 * DAY)
    with pytest.raises(CommandRejected, match="workflow 'wf-1' is completed"):
        h.decide("approve", T0 + 3 * DAY + 5)


# -- evolve and snapshots agree with decide ------------------------------------------------------


def test_folding_the_history_and_snapshots_give_the_same_state() -> None:
    h = started()
    h.fire_due(T0 + DAY)
    h.decide("approve", T0 + DAY + 1, actor="lee", actor_roles_json='["lead"]')
    folded = h.d.fold(h.history)
    assert folded is not None and h.state is not None
    assert folded.to_dict() == h.state.to_dict()
    assert WorkflowState.from_json(h.state.to_json()).to_dict() == h.state.to_dict()
    task = folded.human_tasks[h.task.task_id]
    assert (task.status, task.actor, task.level, task.roles) == (
        HumanTaskStatus.APPROVED,
        "lee",
        1,
        ("approver", "lead"),
    )


# -- the validator ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"on_expiry": "approve"}, r"got 'approve' \(an expiry never approves\)"),
        ({"on_expiry": "pay"}, "on_expiry 'pay' is the approve path; an expiry never approves"),
        ({"on_expiry": "nowhere"}, "on_expiry must be 'reject', 'cancel' or a state name"),
        ({"on_approve": "nowhere"}, "on_approve targets unknown state 'nowhere'"),
        ({"on_reject": "nowhere"}, "on_reject targets unknown state 'nowhere'"),
        ({"role": ""}, "role must name the qualification"),
        ({"expires": 0}, "expires must be > 0 seconds"),
        ({"reminders": [timedelta(days=4)]}, "reminder 1 is not before the expiry"),
        ({"escalations": [Escalation(10)]}, "escalation 1 names neither an owner nor a role"),
        (
            {"escalations": [Escalation(20, role="a"), Escalation(10, role="b")]},
            "escalation 2 is not later than the one before",
        ),
        ({"policy_version": ""}, "policy_version must be a non-empty string"),
    ],
)
def test_the_validator_refuses_bad_human_tasks(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        approval(**overrides)


def test_a_human_task_state_takes_no_transitions() -> None:
    with pytest.raises(DefinitionError, match="a human task decides where the run goes"):
        WorkflowDefinition(
            "x",
            1,
            Pay,
            [
                State(
                    "ask",
                    wait=HumanTask(
                        "t", role="r", operation=operation, on_approve="done", expires=10
                    ),
                    transitions=[Transition("done")],
                ),
                State("done", complete=lambda ctx: {}),
            ],
        )


def test_the_definition_digest_covers_the_task() -> None:
    assert approval().digest != approval(policy_version="2").digest
    assert approval().digest == approval().digest


# -- the bundled example ---------------------------------------------------------------------------


@pytest.fixture
def approvals() -> Iterator[Any]:
    """The example module, and the example app's registrations restored after the test.

    Never reloaded: a reload rebinds the module's models while the app keeps the handlers
    registered first, whose results then fail their own output model in any later test."""
    saved = (dict(app.definitions), dict(app.handlers), app._decider)
    name = "orchestrator.examples.approvals"
    module = sys.modules.get(name) or importlib.import_module(name)
    try:
        yield module
    finally:
        app.definitions.clear()
        app.definitions.update(saved[0])
        app.handlers.clear()
        app.handlers.update(saved[1])
        app._decider = saved[2]


def test_the_payment_approval_example_pays_what_was_approved(approvals: Any) -> None:
    payment_approval = approvals.payment_approval
    assert app.definitions[("payment_approval", 1)] is payment_approval
    assert "record_payment" in app.handlers
    h = Harness(payment_approval)
    inp = {"payment_id": "p-1", "account": "acc-9", "amount": 12.5, "requested_by": "sam"}
    h.send(StartWorkflow("payment_approval", 1, json.dumps(inp)), at=T0, mid="run-1")
    assert json.loads(h.task.evidence_json) == {
        "payment": {"account": "acc-9", "amount": 12.5, "payment_id": "p-1"},
        "requested_by": "sam",
    }
    events = h.decide("approve", T0 + HOUR, actor="fin", actor_roles_json='["finance-approver"]')
    sched = events[-1]
    assert isinstance(sched, ActivityScheduled) and sched.activity_type == "record_payment"
    result = '{"payment_id":"p-1","recorded":true}'
    done = h.send(CompleteActivity(sched.activity_id, 1, result), T0 + HOUR + 1)
    assert done[1:] == [
        WorkflowCompleted('{"decided_by":"fin","payment_id":"p-1","status":"paid"}')
    ]
