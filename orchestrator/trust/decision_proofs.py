"""Decision proofs: only Keel's own processes can decide a human task.

Anyone who can produce to ``<prefix>.commands`` could otherwise send a ``DecideHumanTask``
claiming any actor and any roles. The connector and ``keel human-tasks decide`` authenticate
the actor, then sign the decision; the orchestrator's command loop refuses a decision
whose proof does not verify (dead letter, nothing written), and ``HumanTaskDecided``
records the proof with the fields it covers, so ``decision_proof`` recomputes it from the
event alone (``keel workflow verify``).

The proof is the lowercase hex HMAC-SHA256, under a key derived from the task-token
secret (``HMAC(secret, "keel decision proof v1")``: a leaked task token or proof key
forges nothing of the other), of the canonical JSON (sorted keys, no spaces, UTF-8) of::

    {"v": 1, "workflow_id", "task_id", "token_hash", "decision", "actor",
     "actor_roles_json", "reason_digest", "operation_digest", "correction_digest"}

``reason_digest`` is the sha256 of the reason and ``correction_digest`` that of the
correction JSON as submitted ("" for none), both as ``HumanTaskDecided`` records them.
The key never reaches a log, an event, a command or an error.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any

from orchestrator.config.settings import Settings
from orchestrator.domain.authoring.waits import sha256_hex
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.fingerprint import canonical_json
from orchestrator.domain.model.messages import DecideHumanTask, HumanTaskDecided
from orchestrator.trust.human_task_tokens import TaskTokens, load_task_tokens

__all__ = [
    "PROOF_KEY_LABEL",
    "DecisionProofs",
    "command_proof",
    "decision_proof",
    "derive_proof_key",
    "load_decision_proofs",
    "load_proof_key",
    "proof_matches",
    "proofs_for",
]

#: The sub-key's label. Task tokens are HMACs of task ids under the same secret; a task
#: id always holds ``/`` (``<workflow>/<run>/<state>#<visit>``), this label never does,
#: so no task token equals the proof key.
PROOF_KEY_LABEL = b"keel decision proof v1"
#: The version of the signed text (the ``v`` field).
PROOF_VERSION = 1
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def derive_proof_key(secret: bytes) -> bytes:
    """The decision-proof key of a deployment's task-token ``secret``."""
    return hmac.new(secret, PROOF_KEY_LABEL, hashlib.sha256).digest()


def _mac(key: bytes, workflow_id: str, fields: dict[str, str]) -> str:
    text = canonical_json({"v": PROOF_VERSION, "workflow_id": workflow_id, **fields})
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def decision_proof(key: bytes, workflow_id: str, decided: HumanTaskDecided) -> str:
    """The proof of a recorded decision, from the event alone (for verifying history)."""
    return _mac(
        key,
        workflow_id,
        {
            "task_id": decided.task_id,
            "token_hash": decided.token_hash,
            "decision": decided.decision,
            "actor": decided.actor,
            "actor_roles_json": decided.actor_roles_json,
            "reason_digest": decided.reason_digest,
            "operation_digest": decided.operation_digest,
            "correction_digest": decided.correction_digest,
        },
    )


def command_proof(key: bytes, workflow_id: str, cmd: DecideHumanTask) -> str:
    """The proof of a decision command: equal to ``decision_proof`` of what it records."""
    return _mac(
        key,
        workflow_id,
        {
            "task_id": cmd.task_id,
            "token_hash": cmd.token_hash,
            "decision": cmd.decision,
            "actor": cmd.actor,
            "actor_roles_json": cmd.actor_roles_json,
            "reason_digest": sha256_hex(cmd.reason),
            "operation_digest": cmd.operation_digest,
            "correction_digest": sha256_hex(cmd.correction_json) if cmd.correction_json else "",
        },
    )


def proof_matches(key: bytes, workflow_id: str, decided: HumanTaskDecided) -> bool:
    """Whether a recorded decision's proof is the one ``key`` gives (constant time)."""
    return hmac.compare_digest(decision_proof(key, workflow_id, decided), decided.proof)


class DecisionProofs:
    """Signs decisions (connector, CLI) and checks them (orchestrator); holds the key."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    def __repr__(self) -> str:
        return "<DecisionProofs>"

    @classmethod
    def from_tokens(cls, tokens: TaskTokens) -> DecisionProofs:
        return cls(tokens.derive(PROOF_KEY_LABEL))

    def sign(self, workflow_id: str, cmd: DecideHumanTask) -> DecideHumanTask:
        """``cmd`` with its proof."""
        from dataclasses import replace

        return replace(cmd, proof=command_proof(self._key, workflow_id, cmd))

    def check(self, workflow_id: str, cmd: DecideHumanTask) -> None:
        """``CommandRejected`` unless ``cmd`` is a complete decision signed with the key."""
        what = f"{cmd.decision[:20]} of human task '{(cmd.task_id or '(by token)')[:200]}'"
        if not (cmd.task_id and cmd.token_hash and cmd.operation_digest):
            raise CommandRejected(
                "a decision names its task id, the hash of the task's token and the "
                f"operation digest; {what} refused"
            )
        if not _HEX64.match(cmd.proof):
            raise CommandRejected(
                "the decision carries no proof (sign it with the connector or `keel human-tasks "
                f"decide`); {what} by '{cmd.actor[:200]}' refused"
            )
        if not hmac.compare_digest(command_proof(self._key, workflow_id, cmd), cmd.proof):
            raise CommandRejected(
                "the decision's proof does not verify (not signed by a Keel process of this "
                f"deployment, or altered since); {what} by '{cmd.actor[:200]}' refused"
            )


def load_proof_key(settings: Settings) -> bytes:
    """The deployment's decision-proof key (``ConfigError`` when no task-token key)."""
    return load_task_tokens(settings, create=False).derive(PROOF_KEY_LABEL)


def load_decision_proofs(settings: Settings) -> DecisionProofs:
    """A signer/checker under the deployment's key (``ConfigError`` when none)."""
    return DecisionProofs(load_proof_key(settings))


def proofs_for(decider: Any) -> DecisionProofs | None:
    """The orchestrator's checker: the key behind the task tokens its decider issues
    (``human_task_tokens.decider_for(settings, app)``); None when it issues none."""
    tokens = getattr(getattr(decider, "task_token_hash", None), "__self__", None)
    return DecisionProofs.from_tokens(tokens) if isinstance(tokens, TaskTokens) else None
