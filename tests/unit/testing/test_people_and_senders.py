"""What comes from outside a run in the environment: human decisions (as a person makes
them, with the operation digest), signals, signed webhooks, and the model's answers."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from orchestrator import Context, HumanTask, KeelApp, State, WorkflowDefinition
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import CommandRefused, HumanTaskDecided, SignalReceived
from orchestrator.testing import WorkflowEnvironment
from tests.unit.testing.kit_app import Order

ORDER = {"order_id": "o-1", "amount": 120.0}


def test_an_approval_with_the_digest_the_approver_saw_charges(env: WorkflowEnvironment) -> None:
    run = env.start("order_approval", ORDER, workflow_id="o-1")
    task = run.human_task("approve_order")
    assert task.evidence == ORDER
    assert task.roles == ("order-approver",)

    decision = run.approve(task, actor="ann", operation_digest=task.operation_digest)

    assert decision.decided, decision.reason
    assert run.result() == {"status": "charged", "charge": "ch-o-1"}
    (decided,) = run.events(HumanTaskDecided)
    assert (decided.actor, decided.decision) == ("ann", "approve")
    assert env.now() == run.recorded_at(HumanTaskDecided)[0]  # no time passed


def test_a_decision_the_engine_refuses_is_answered_with_its_reason(
    env: WorkflowEnvironment,
) -> None:
    run = env.start("order_approval", ORDER, workflow_id="o-1")
    task = run.human_task()

    stale = run.approve(task, actor="ann", operation_digest="0" * 64)
    unqualified = run.approve(task, actor="ivan", roles=["intern"])

    assert not stale.decided and "stale approval" in stale.reason
    assert not unqualified.decided and "holds none of the roles" in unqualified.reason
    assert run.status == "waiting"
    assert run.reject(task, actor="ann").decided
    assert run.result() == {"status": "rejected", "charge": None}


def test_an_actor_refused_for_a_role_decides_once_granted_it_with_the_same_words(
    env: WorkflowEnvironment,
) -> None:
    """The message id of a decision binds the roles the sender vouched for: the same words
    from an actor granted the role since are a new request, not the refused one repeated
    (which the engine would answer, as before, with the first refusal)."""
    run = env.start("order_approval", ORDER, workflow_id="o-1")
    task = run.human_task()

    before = run.approve(task, actor="ivan", roles=["intern"], reason="looks right")
    again = run.approve(task, actor="ivan", roles=["intern"], reason="looks right")
    granted = run.approve(
        task, actor="ivan", roles=["intern", "order-approver"], reason="looks right"
    )

    assert not before.decided and "holds none of the roles" in before.reason
    assert not again.decided and again.reason == before.reason
    assert granted.decided, granted.reason
    (decided,) = run.events(HumanTaskDecided)
    assert (decided.actor, decided.decision) == ("ivan", "approve")
    assert run.result() == {"status": "charged", "charge": "ch-o-1"}


#: Whether the price service the operation below reads is up (a test flips it).
PRICES_UP = {"up": True}


def _priced_charge(ctx: Context) -> dict[str, Any]:
    if not PRICES_UP["up"]:
        raise ConnectionError("the price service is down")
    return {"resource": "orders.charge", "arguments": ctx.input_dict}


priced = KeelApp("priced-approval")
priced.workflow(
    WorkflowDefinition(
        "priced_approval",
        1,
        Order,
        [
            State(
                "approval",
                wait=HumanTask(
                    "approve",
                    role="approver",
                    operation=_priced_charge,
                    expires=timedelta(days=1),
                    on_approve="done",
                    on_reject="done",
                ),
            ),
            State(
                "done", complete=lambda ctx: {"decision": ctx.human_tasks["approve"]["decision"]}
            ),
        ],
    )
)


def test_a_decision_refused_while_its_operation_cannot_be_computed_passes_when_sent_again() -> None:
    """A refusal that says nothing of the request (the operation's code failed) does not
    stand for the same words sent later: they are the request's next attempt. A refusal
    of the request itself (a missing role) stands, however often it is repeated."""
    PRICES_UP["up"] = True
    with WorkflowEnvironment(priced) as env:
        run = env.start("priced_approval", ORDER, workflow_id="p-1")
        task = run.human_task()
        PRICES_UP["up"] = False
        down = run.approve(task, actor="ann", roles=["approver"], reason="ok")
        still_down = run.approve(task, actor="ann", roles=["approver"], reason="ok")
        PRICES_UP["up"] = True
        up = run.approve(task, actor="ann", roles=["approver"], reason="ok")

        assert not down.decided and "the operation cannot be computed now" in down.reason
        assert "the price service is down" in down.reason
        assert not still_down.decided and still_down.message_id == f"{down.message_id}/again/1"
        assert up.decided, up.reason
        assert up.message_id == f"{down.message_id}/again/2"
        refused = run.events(CommandRefused)
        assert [r.command_id for r in refused] == [down.message_id, still_down.message_id]
        (decided,) = run.events(HumanTaskDecided)
        assert (decided.actor, decided.decision) == ("ann", "approve")
        assert run.result() == {"decision": "approve"}
        # The accepted attempt again: the first result stands, nothing more is recorded.
        assert run.approve(task, actor="ann", roles=["approver"], reason="ok").decided
        assert len(run.events(HumanTaskDecided)) == 1


def test_a_signal_to_a_signal_the_run_does_not_know_is_refused(env: WorkflowEnvironment) -> None:
    run = env.start("await_delivery", ORDER, workflow_id="o-1")
    assert run.query("where") == {"state": "in_transit", "status": "waiting"}
    with pytest.raises(CommandRejected, match="has no signal 'lost'"):
        run.signal("lost", {})
    run.signal("delivered", {"at": "noon"})
    assert run.result() == {"delivered": {"at": "noon"}}
    with pytest.raises(CommandRejected, match="is completed"):
        run.signal("delivered", {"at": "noon"})


def test_a_signed_webhook_is_verified_routed_and_deduplicated(env: WorkflowEnvironment) -> None:
    early = env.deliver_webhook("carrier", {"event_id": "e0", "order_id": "o-1", "at": "x"})
    assert early.status == 404  # no run yet: the sender retries
    run = env.start("await_delivery", ORDER, workflow_id="o-1")

    body = json.dumps({"event_id": "e1", "order_id": "o-1", "at": "noon"}).encode()
    forged = env.deliver_webhook("carrier", body, {"Keel-Signature": "t=1,v1=00"})
    first = env.deliver_webhook("carrier", body, env.sign_webhook("carrier", body))
    again = env.deliver_webhook("carrier", body)

    assert forged.status == 401
    assert first.accepted and first.workflow_id == "o-1"
    assert (again.status, again.reason) == (200, "duplicate")
    assert len(run.events(SignalReceived)) == 1
    assert run.result() == {"delivered": {"at": "noon"}}
    late = env.deliver_webhook("carrier", {"event_id": "e2", "order_id": "o-1", "at": "y"})
    assert late.status == 409


def test_a_scripted_model_answers_an_llm_step(env: WorkflowEnvironment) -> None:
    env.script_llm([{"json": {"category": "bulk", "confidence": 0.93}}])
    run = env.start("triage_order", ORDER)

    result = run.result()

    assert result["output"] == {"category": "bulk", "confidence": 0.93}
    assert result["llm"]["provider"] == "scripted"
    assert env.llm_calls == 1


def test_an_invalid_model_answer_is_repaired_from_the_script(env: WorkflowEnvironment) -> None:
    env.script_llm([{"content": "not json"}, {"json": {"category": "vip", "confidence": 0.7}}])
    run = env.start("triage_order", ORDER)

    result = run.result()

    assert result["output"]["category"] == "vip"
    assert result["llm"]["validation"]["repairs"] == 1
    assert env.llm_calls == 2


def test_a_start_of_a_taken_id_joins_or_conflicts_as_the_client_says(
    env: WorkflowEnvironment,
) -> None:
    from orchestrator.errors import WorkflowIdConflictError

    first = env.start("await_delivery", ORDER, workflow_id="o-1")
    again = env.start("await_delivery", ORDER, workflow_id="o-1")
    assert again.state().run_id == first.state().run_id
    with pytest.raises(WorkflowIdConflictError, match="different input"):
        env.start("await_delivery", {**ORDER, "amount": 1.0}, workflow_id="o-1")
    with pytest.raises(WorkflowIdConflictError, match="not of 'ship_later'"):
        env.start("ship_later", ORDER, workflow_id="o-1")
