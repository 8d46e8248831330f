"""Decision proofs (orchestrator/trust/decision_proofs.py): what a signer binds, what the
orchestrator's check refuses, and that the proof recomputes from the recorded event."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json

import pytest
from pydantic import SecretStr

from orchestrator.config.settings import Settings
from orchestrator.domain.authoring.waits import sha256_hex
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import DecideHumanTask, HumanTaskDecided
from orchestrator.trust import decision_proofs
from orchestrator.trust.decision_proofs import (
    PROOF_KEY_LABEL,
    DecisionProofs,
    command_proof,
    decision_proof,
    derive_proof_key,
    load_proof_key,
    proof_matches,
    proofs_for,
)
from orchestrator.trust.human_task_tokens import TaskTokens

SECRET = b"s" * 40
KEY = derive_proof_key(SECRET)
WF = "pay-1"
CMD = DecideHumanTask(
    task_id="pay-1/run/approval#1",
    token_hash="a" * 64,
    decision="approve",
    actor="alice",
    actor_roles_json='["finance-approver"]',
    reason="matches invoice 7",
    operation_digest="b" * 64,
    correction_json='{"total":4200}',
)


def recorded(cmd: DecideHumanTask) -> HumanTaskDecided:
    """The event the domain records for a signed ``cmd`` (the fields the proof covers)."""
    return HumanTaskDecided(
        task_id=cmd.task_id,
        decision=cmd.decision,
        actor=cmd.actor,
        reason_digest=sha256_hex(cmd.reason),
        evidence_digest="c" * 64,
        operation_digest=cmd.operation_digest,
        decided_at=1,
        correction_json='{"total":4200.0}',  # validated: may differ from what was signed
        token_hash=cmd.token_hash,
        actor_roles_json=cmd.actor_roles_json,
        proof=cmd.proof,
        correction_digest=sha256_hex(cmd.correction_json),
    )


def test_the_proof_is_hmac_sha256_of_the_documented_canonical_json() -> None:
    text = json.dumps(
        {
            "v": 1,
            "workflow_id": WF,
            "task_id": CMD.task_id,
            "token_hash": CMD.token_hash,
            "decision": "approve",
            "actor": "alice",
            "actor_roles_json": '["finance-approver"]',
            "reason_digest": sha256_hex(CMD.reason),
            "operation_digest": CMD.operation_digest,
            "correction_digest": sha256_hex(CMD.correction_json),
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    key = hmac.new(SECRET, b"keel decision proof v1", hashlib.sha256).digest()
    assert PROOF_KEY_LABEL == b"keel decision proof v1" and key == KEY
    expected = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    assert command_proof(KEY, WF, CMD) == expected
    assert len(expected) == 64 and expected == expected.lower()


def test_the_recorded_event_alone_recomputes_the_proof() -> None:
    signed = DecisionProofs(KEY).sign(WF, CMD)
    event = recorded(signed)
    assert decision_proof(KEY, WF, event) == signed.proof
    assert proof_matches(KEY, WF, event)
    assert not proof_matches(derive_proof_key(b"t" * 40), WF, event)
    assert not proof_matches(KEY, "pay-2", event)


@pytest.mark.parametrize(
    "change",
    [
        {"task_id": "pay-1/run/approval#2"},
        {"token_hash": "d" * 64},
        {"decision": "reject"},
        {"actor": "mallory"},
        {"actor_roles_json": '["finance-approver","finance-lead"]'},
        {"reason": "other"},
        {"operation_digest": "e" * 64},
        {"correction_json": '{"total":1}'},
    ],
)
def test_any_field_change_invalidates_the_proof(change: dict[str, str]) -> None:
    proofs = DecisionProofs(KEY)
    signed = proofs.sign(WF, CMD)
    proofs.check(WF, signed)
    with pytest.raises(CommandRejected, match="the decision's proof does not verify"):
        proofs.check(WF, dataclasses.replace(signed, **change))
    with pytest.raises(CommandRejected, match="the decision's proof does not verify"):
        proofs.check("pay-2", signed)  # the same decision for another workflow


def test_unsigned_incomplete_and_foreign_decisions_are_refused_with_a_reason() -> None:
    proofs = DecisionProofs(KEY)
    for missing in ("task_id", "token_hash", "operation_digest"):
        with pytest.raises(CommandRejected, match="a decision names its task id, the hash"):
            proofs.check(WF, proofs.sign(WF, dataclasses.replace(CMD, **{missing: ""})))
    with pytest.raises(CommandRejected, match="carries no proof") as exc:
        proofs.check(WF, CMD)
    assert str(exc.value).endswith("by 'alice' refused")
    for proof in ("XYZ", "A" * 64, "0" * 63):
        with pytest.raises(CommandRejected, match="carries no proof"):
            proofs.check(WF, dataclasses.replace(CMD, proof=proof))
    foreign = DecisionProofs(derive_proof_key(b"t" * 40)).sign(WF, CMD)
    with pytest.raises(CommandRejected, match="does not verify") as exc:
        proofs.check(WF, foreign)
    assert KEY.hex() not in str(exc.value) and command_proof(KEY, WF, CMD) not in str(exc.value)


def test_the_check_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    original = hmac.compare_digest

    def compare(a: str, b: str) -> bool:
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr(decision_proofs.hmac, "compare_digest", compare)
    proofs = DecisionProofs(KEY)
    signed = proofs.sign(WF, CMD)
    proofs.check(WF, signed)
    assert proof_matches(KEY, WF, recorded(signed))
    assert calls == [(signed.proof, signed.proof)] * 2


def test_the_key_is_a_sub_key_of_the_task_token_secret_and_never_shown() -> None:
    tokens = TaskTokens(SECRET, "test")
    proofs = DecisionProofs.from_tokens(tokens)
    assert proofs.sign(WF, CMD).proof == command_proof(KEY, WF, CMD)
    # task tokens are HMACs of task ids, which always hold "/": none is the proof key
    assert b"/" not in PROOF_KEY_LABEL and "/" in "pay-1/run/approval#1"
    assert repr(proofs) == "<DecisionProofs>" and SECRET.decode() not in repr(proofs)
    settings = Settings(task_token_secret=SecretStr(SECRET.decode()))
    assert load_proof_key(settings) == KEY


def test_the_orchestrator_finds_the_key_through_its_decider() -> None:
    class Decider:
        def __init__(self, hasher: object) -> None:
            self.task_token_hash = hasher

    tokens = TaskTokens(SECRET, "test")
    found = proofs_for(Decider(tokens.hasher))
    assert found is not None and found.sign(WF, CMD).proof == command_proof(KEY, WF, CMD)
    assert proofs_for(Decider(None)) is None
    assert proofs_for(Decider(lambda task_id: "")) is None  # a replay's recorded hashes
