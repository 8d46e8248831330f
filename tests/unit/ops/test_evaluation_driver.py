"""The driver of ``keel evaluate --app --driver`` (docs/evaluation.md, "A workflow that
waits"): what a waiting run waits for, which rule answers it (the first that matches),
the error when none does, the checks made before a batch, the webhook signatures the
connector accepts, and the scripted model's answers that are never used up."""

from __future__ import annotations

import asyncio
import json

import pytest

from connectors.schemes.verifiers import keys_of, verify_delivery
from handlers.llm.chat import ChatRequest
from handlers.llm.providers import ScriptedProvider
from ops.evaluation.driving import DriverAgent
from ops.evaluation.webhook_signing import secret_for, signed_headers
from orchestrator.application.driver_rules import (
    Waiting,
    load_driver,
    unanswered_message,
    waiting_of,
)
from orchestrator.application.webhook_sources import SignatureScheme, WebhookSignal, WebhookSource
from orchestrator.client import Driver, SignalRule, TaskRule, WebhookRule
from orchestrator.config.settings import Settings
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.messages import SignalWorkflow
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.state_parts import HumanTaskState, TimerState, WaitState
from orchestrator.domain.model.vocabulary import HumanDecision, WaitKind, WorkflowStatus
from tests.waiting_app import app
from tests.waiting_app import driver as orders_driver

DEFINITION = app.get("order_approval", 1)
TASK_ID = "wf-1/r1/approval#2"


def _state(
    state: str = "approval", total: int = 120, status: WorkflowStatus = WorkflowStatus.WAITING
) -> WorkflowState:
    """A run of ``order_approval`` waiting in ``state`` (its task open in ``approval``)."""
    if state == "approval":
        wait = WaitState(kind=WaitKind.HUMAN, task_id=TASK_ID)
    else:
        wait = WaitState(kind=WaitKind.SIGNAL, signal_name=_SIGNALS[state])
    task = HumanTaskState(
        task_id=TASK_ID,
        task_name="approve_order",
        state="approval",
        visit=2,
        owner="",
        role="order-approver",
        roles=("order-approver", "lead"),
        evidence_digest="e",
        operation_digest="o",
        token_hash="t",
        opened_at=1,
        due_at=0,
        expires_at=10**13,
    )
    return WorkflowState(
        workflow_id="wf-1",
        run_id="r1",
        name="order_approval",
        version=1,
        digest=DEFINITION.digest,
        input_json=json.dumps({"order": "A", "total": total}),
        status=status,
        current_state=state,
        visit=2,
        wait=wait,
        human_tasks={TASK_ID: task},
    )


_SIGNALS = {"payment": "payment_settled", "ship": "delivered"}


def _answer(driver: Driver, state: WorkflowState) -> object:
    waiting = waiting_of(state)
    assert waiting is not None
    return driver.answer(waiting, Context(DEFINITION, state))


def test_a_waiting_run_says_what_it_waits_for() -> None:
    task = waiting_of(_state())
    assert task == Waiting(
        "wf-1",
        "r1",
        "order_approval",
        1,
        "approval",
        2,
        WaitKind.HUMAN,
        "approve_order",
        task_id=TASK_ID,
        roles=("order-approver", "lead"),
    )
    # as the read model holds it: the state's JSON, read back
    assert waiting_of(WorkflowState.from_json(_state().to_json())) == task
    signal = waiting_of(_state("payment"))
    assert signal is not None and (signal.kind, signal.what) == (
        WaitKind.SIGNAL,
        "signal 'payment_settled'",
    )
    assert signal.key == ("wf-1", "r1", "payment", 2) and signal.ends_alone_at is None


def test_a_run_not_waiting_or_already_answered_waits_for_nothing() -> None:
    assert waiting_of(_state(status=WorkflowStatus.RUNNING)) is None
    answered = _state("payment")
    answered.wait = WaitState(kind=WaitKind.SIGNAL, signal_name="payment_settled", satisfied=True)
    assert waiting_of(answered) is None
    asleep = _state("payment")
    asleep.wait = WaitState(kind=WaitKind.TIMER, timer_id="t1")
    assert waiting_of(asleep) is None


def test_the_timer_that_ends_a_wait_alone_is_named() -> None:
    state = _state("payment")
    state.timers = {
        "t1": TimerState(fire_at=5_000, purpose="timeout:payment_settled"),
        "t2": TimerState(fire_at=1_000, purpose="retry:a1"),
    }
    waiting = waiting_of(state)
    assert waiting is not None and waiting.ends_alone_at == 5_000
    task = _state()
    task.timers = {
        "t3": TimerState(fire_at=7_000, purpose="human:remind:1"),
        "t4": TimerState(fire_at=9_000, purpose="human:expire:0"),
    }
    opened = waiting_of(task)  # the expiry ends it, a reminder does not
    assert opened is not None and opened.ends_alone_at == 9_000


def test_the_first_matching_rule_answers_and_filters_narrow_it() -> None:
    d = Driver()
    wrong_workflow = d.signal("payment_settled", 1, workflow="other")
    wrong_state = d.signal("payment_settled", 2, state="elsewhere")
    not_now = d.signal("payment_settled", 3, when=lambda ctx: ctx.input_dict["total"] > 500)
    first = d.signal("payment_settled", lambda ctx: {"amount": ctx.input_dict["total"]})
    d.signal("payment_settled", 5)
    rule = _answer(d, _state("payment"))
    assert rule is first and rule not in (wrong_workflow, wrong_state, not_now)
    assert isinstance(rule, SignalRule)
    assert rule.payload_of(Context(DEFINITION, _state("payment"))) == {"amount": 120}
    assert _answer(d, _state("payment", total=900)) is not_now


def test_a_human_task_is_answered_only_by_a_task_rule_and_decides_from_the_run() -> None:
    d = Driver()
    d.signal("approve_order", {})  # a signal rule of the same name answers no person
    assert _answer(d, _state()) is None
    rule = _answer(orders_driver, _state(total=120))
    assert isinstance(rule, TaskRule)
    assert rule.decision_of(Context(DEFINITION, _state(total=120))) is HumanDecision.APPROVE
    assert rule.decision_of(Context(DEFINITION, _state(total=900))) is HumanDecision.REJECT
    webhook = _answer(orders_driver, _state("payment"))
    assert isinstance(webhook, WebhookRule) and webhook.source == "payments"
    assert webhook.body_of(Context(DEFINITION, _state("payment"))) == {
        "id": "pay-wf-1",
        "order_id": "wf-1",
        "payment": {"amount": 120},
    }


def test_a_decision_that_is_neither_approve_nor_reject_is_refused() -> None:
    with pytest.raises(InvalidInputError) as given:
        Driver().human_task("approve_order", "approved")
    assert str(given.value) == (
        "human task 'approve_order': a decision is 'approve' or 'reject', not 'approved'"
    )
    computed = Driver()
    computed.human_task("approve_order", lambda ctx: "maybe")
    rule = _answer(computed, _state())
    assert isinstance(rule, TaskRule)
    with pytest.raises(InvalidInputError) as decided:
        rule.decision_of(Context(DEFINITION, _state()))
    assert str(decided.value) == (
        "the driver's rule for human task 'approve_order' decided 'maybe'; "
        "a decision is 'approve' or 'reject'"
    )


def test_the_error_names_the_run_its_state_and_what_it_waits_for() -> None:
    task = waiting_of(_state())
    assert task is not None
    assert unanswered_message([task], "tests.waiting_app:driver") == (
        "run 'wf-1' (order_approval v1) waits in state 'approval' for human task "
        "'approve_order', and no rule of the driver tests.waiting_app:driver answers it: "
        'add driver.human_task("approve_order", ...) '
        '(docs/evaluation.md, "A workflow that waits")'
    )
    signal = waiting_of(_state("ship"))
    assert signal is not None
    assert unanswered_message([signal, task, signal, task], None) == (
        "run 'wf-1' (order_approval v1) waits in state 'ship' for signal 'delivered'; "
        "run 'wf-1' (order_approval v1) waits in state 'approval' for human task "
        "'approve_order'; run 'wf-1' (order_approval v1) waits in state 'ship' for signal "
        "'delivered' (and 1 more), and no driver answers them: give --driver MODULE:ATTR, "
        'a Driver with driver.signal("delivered", ...) '
        '(docs/evaluation.md, "A workflow that waits")'
    )


def test_a_rule_that_can_never_answer_is_refused_before_the_batch() -> None:
    d = Driver("typos")
    d.signal("payment_setled", {})
    d.human_task("approve_ordr", HumanDecision.APPROVE)
    d.webhook("delivered", source="carrier", body={})
    d.signal("elsewhere", {}, workflow="another_workflow")  # not this workflow's: ignored
    with pytest.raises(InvalidInputError) as refused:
        d.check(app, "order_approval")
    assert str(refused.value) == (
        "driver 'typos': order_approval waits for no signal 'payment_setled' (signals: "
        "delivered, payment_settled); order_approval waits for no human task 'approve_ordr' "
        "(human tasks: approve_order); the application declares no webhook source 'carrier' "
        '(sources: payments) (docs/evaluation.md, "A workflow that waits")'
    )
    orders_driver.check(app, "order_approval")  # the test app's own driver is sound


def test_load_driver_names_what_is_wrong() -> None:
    assert load_driver("tests.waiting_app:driver") is orders_driver
    for spec, message in (
        ("tests.waiting_app", "--driver must look like 'module:attr', got 'tests.waiting_app'"),
        (
            "tests.waiting_app:nobody",
            "cannot load the driver 'tests.waiting_app:nobody': "
            "module 'tests.waiting_app' has no attribute 'nobody'",
        ),
        (
            "tests.nowhere:driver",
            "cannot load the driver 'tests.nowhere:driver': No module named 'tests.nowhere'",
        ),
        ("tests.waiting_app:app", "'tests.waiting_app:app' is a KeelApp, not a Driver"),
    ):
        with pytest.raises(InvalidInputError) as refused:
            load_driver(spec)
        assert str(refused.value) == message


@pytest.mark.parametrize("scheme", list(SignatureScheme))
def test_a_delivery_signed_for_the_driver_is_what_the_connector_verifies(
    scheme: SignatureScheme,
) -> None:
    source = WebhookSource(
        "payments",
        "KEEL_WEBHOOK_PAYMENTS_SECRETS",
        (lambda body: body["id"]) if scheme is SignatureScheme.KEEL else None,
        lambda _: WebhookSignal("wf-1", "payment_settled"),
        scheme=scheme,
    )
    body_obj = {"id": "evt-1", "event_id": "evt-1", "type": "payment", "order_id": "wf-1"}
    body = json.dumps(body_obj).encode()
    secret = secret_for(scheme)
    headers = signed_headers(scheme, secret, body, "evt-1", "payment", now=1_700_000_000)
    verified = verify_delivery(source, keys_of(source, secret), headers, body, 1_700_000_010)
    assert (verified.event_id, verified.body) == ("evt-1", body_obj)
    other = secret_for(scheme)  # signed under another secret: refused
    with pytest.raises(Exception, match="does not match"):
        verify_delivery(source, keys_of(source, other), headers, body, 1_700_000_010)


def test_the_model_answers_every_matching_call_not_only_the_first() -> None:
    d = Driver()
    d.llm("Classify", json={"label": "ok"})
    d.llm(content="fallback")
    script = d.llm_script()
    assert script["responses"] == [
        {"keep": True, "match": "Classify", "json": {"label": "ok"}, "prompt_tokens": 10,
         "completion_tokens": 10},
    ]  # fmt: skip
    assert script["default"]["content"] == "fallback"
    provider = ScriptedProvider(script)

    def ask(text: str) -> str | None:
        request = ChatRequest("m", [{"role": "user", "content": text}])
        return asyncio.run(provider.complete(request)).content

    assert [ask("Classify A"), ask("Classify B"), ask("other")] == [
        '{"label": "ok"}',
        '{"label": "ok"}',
        "fallback",
    ]
    once = ScriptedProvider({"responses": [{"match": "X", "content": "1"}], "default": None})
    assert asyncio.run(once.complete(ChatRequest("m", [{"content": "X"}]))).content == "1"
    with pytest.raises(Exception, match="no response left"):
        asyncio.run(once.complete(ChatRequest("m", [{"content": "X"}])))
    with pytest.raises(InvalidInputError, match="one of json=, content= or tool_calls="):
        d.llm("Classify")


class _Client:
    """What the agent uses of a KeelClient: the read model's states, and send_as."""

    def __init__(self, *states: WorkflowState) -> None:
        self.states = {s.workflow_id: s for s in states}
        self.projection = self
        self.sent: list[tuple[str, SignalWorkflow, str]] = []

    def load_states(self, ids: list[str]) -> dict[str, WorkflowState]:
        return {wf: self.states[wf] for wf in ids if wf in self.states}

    def send_as(self, workflow_id: str, payload: SignalWorkflow, message_id: str) -> str:
        self.sent.append((workflow_id, payload, message_id))
        return message_id


def _agent(driver: Driver | None, client: _Client, repeat: bool = False) -> DriverAgent:
    return DriverAgent(
        Settings(),
        app,
        client,  # type: ignore[arg-type]  # what the agent reads of a KeelClient
        driver,
        "t:d",
        lambda: "",
        {},
        repeat,
    )


def test_the_agent_answers_each_wait_once_and_twice_under_duplicates() -> None:
    client = _Client(_state("ship"))
    agent = _agent(orders_driver, client, repeat=True)
    agent.answer(["wf-1"], deadline_ms=0)
    agent.answer(["wf-1"], deadline_ms=0)  # the same wait seen again: not answered again
    command = SignalWorkflow("delivered", '{"carrier": "DHL"}', None)
    mid = "keel-evaluate/wf-1/r1/ship#2/delivered"
    assert client.sent == [("wf-1", command, mid), ("wf-1", command, mid)]
    assert agent.counts() == {"signal": 1}
    webhook_as_signal = Driver()  # an app without the source: the body is the payload
    webhook_as_signal.webhook("payment_settled", source=None, body={"amount": 3})
    paid = _Client(_state("payment"))
    _agent(webhook_as_signal, paid).answer(["wf-1"], deadline_ms=0)
    assert [p for _, p, _ in paid.sent] == [SignalWorkflow("payment_settled", '{"amount": 3}')]


def test_a_wait_no_rule_answers_stops_the_batch_unless_a_timer_ends_it_in_time() -> None:
    state = _state("payment")
    state.timers = {"t1": TimerState(fire_at=5_000, purpose="timeout:payment_settled")}
    agent = _agent(Driver(), _Client(state))
    agent.answer(["wf-1"], deadline_ms=6_000)  # its timeout ends it within the batch
    with pytest.raises(InvalidInputError) as stuck:
        agent.answer(["wf-1"], deadline_ms=4_000)
    assert str(stuck.value).startswith(
        "run 'wf-1' (order_approval v1) waits in state 'payment' for signal 'payment_settled', "
        "and no rule of the driver t:d answers it"
    )


def test_a_rule_function_that_raises_names_the_run_and_the_rule() -> None:
    broken = Driver()
    broken.signal("delivered", lambda ctx: ctx.input_dict["missing"])
    with pytest.raises(InvalidInputError) as failed:
        _agent(broken, _Client(_state("ship"))).answer(["wf-1"], deadline_ms=0)
    assert str(failed.value) == (
        "the driver (its rule for 'delivered') failed on run 'wf-1' waiting in state 'ship' "
        "for signal 'delivered': KeyError: 'missing'"
    )


def test_the_next_wait_of_a_run_is_answered_though_its_state_has_the_same_visit_number() -> None:
    d = Driver()
    d.signal("payment_settled", 1)
    d.signal("delivered", 2)
    client = _Client(_state("payment"))  # visit 2 of 'payment'
    agent = _agent(d, client)
    agent.answer(["wf-1"], deadline_ms=0)
    client.states["wf-1"] = _state("ship")  # visit 2 of 'ship': another wait
    agent.answer(["wf-1"], deadline_ms=0)
    assert [(p.signal_name, mid) for _, p, mid in client.sent] == [
        ("payment_settled", "keel-evaluate/wf-1/r1/payment#2/payment_settled"),
        ("delivered", "keel-evaluate/wf-1/r1/ship#2/delivered"),
    ]
