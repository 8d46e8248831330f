"""The fault classes ``keel evaluate`` injects, and how each is set up (docs/evaluation.md).

Each class is injected by a real mechanism: a SIGKILL of the orchestrator and the worker,
the fake ledger committing then dropping its answer, the connector's webhook and the task
API receiving the same delivery several times and out of order, the ledger refusing every
reversal. ``none`` is the fault-free batch every other class is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ops.invoices.invoice_demo import DEMO_PAYABLES_FAULTS
from ops.invoices.invoice_samples import Scenario

__all__ = ["FaultClass", "FaultPlan", "Variant", "parse_faults", "parse_variants", "plan_for"]


class FaultClass(StrEnum):
    NONE = "none"
    CRASH = "crash"
    RESPONSE_LOSS = "response_loss"
    DUPLICATE_CALLBACKS = "duplicate_callbacks"
    COMPENSATION_FAILURE = "compensation_failure"
    QUEUE_FULL = "queue_full"
    OLD_SCHEMA = "old_schema"


#: The ledger outage of ``queue_full``: shorter than a posting's retry budget (6 attempts,
#: each at least ``Retry-After`` after the last: 5 s), so every run can wait it out.
OUTAGE_S = 3.0
OUTAGE_RETRY_AFTER_S = 1

#: Accounts payable refuses one supplier's payments for good in every batch: that is the
#: sample data's business failure (the posting is reversed), not an injected fault.
_BUSINESS = {"refuse_payments_to": DEMO_PAYABLES_FAULTS["refuse_payments_to"]}


class Variant(StrEnum):
    """The two designs of the invoice process the evaluation compares."""

    BACKBONE = "backbone"  # invoice_pipeline: deterministic steps, LLM nodes, people
    AGENT = "agent"  # invoice_agent: one bounded agent with tools

    @property
    def workflow(self) -> str:
        return "invoice_pipeline" if self is Variant.BACKBONE else "invoice_agent"

    @property
    def app(self) -> str:
        return f"orchestrator.examples.{self.workflow}:app"

    @property
    def next_app(self) -> str:
        """The deployment ``old_schema`` moves to: version 2 beside version 1."""
        return f"ops.evaluation.next_deployment:{self.value}"


@dataclass(frozen=True)
class FaultPlan:
    """How one class is injected, and what its runs should end in where that differs."""

    fault: FaultClass
    what: str
    ledger_faults: dict[str, Any] = field(default_factory=dict)
    payables_faults: dict[str, Any] = field(default_factory=lambda: dict(_BUSINESS))
    #: Outcomes that differ from the fault-free batch's, by scenario.
    expected: dict[Scenario, str] = field(default_factory=dict)
    #: SIGKILL the orchestrator and the worker once this share of the runs has started
    #: (and one has ended, one not).
    kill_at: float | None = None
    #: Deliver every upload and every decision this many times (1: once).
    deliveries: int = 1
    #: The ledger is down (503 with ``Retry-After``) from the start until this many
    #: seconds after its first request.
    outage_s: float | None = None
    #: Deliver this share of the runs on version 1, then deploy version 2 (the services
    #: restart on it; runs waiting for a person migrate), then deliver the rest.
    deploy_at: float | None = None


def plan_for(fault: FaultClass, runs: int) -> FaultPlan:
    """The injection of ``fault`` into a batch of ``runs`` invoices."""
    match fault:
        case FaultClass.NONE:
            return FaultPlan(fault, "no injected fault: the baseline of every other class")
        case FaultClass.CRASH:
            return FaultPlan(
                fault,
                "the orchestrator and the worker SIGKILLed (and restarted) with runs in flight",
                kill_at=0.5,
            )
        case FaultClass.RESPONSE_LOSS:
            return FaultPlan(
                fault,
                "the ledger commits a posting, then drops the connection before answering",
                ledger_faults={"drop_after_commit": max(2, runs // 3)},
            )
        case FaultClass.DUPLICATE_CALLBACKS:
            return FaultPlan(
                fault,
                "every upload delivered three times (a redelivery and a re-upload, out of "
                "order) and every human decision sent twice",
                deliveries=3,
            )
        case FaultClass.COMPENSATION_FAILURE:
            return FaultPlan(
                fault,
                "the ledger refuses every reversal: the refused payment's posting cannot be undone",
                ledger_faults={"reversals_fail": 1000},
                expected={Scenario.PAYMENT_FAILS: "compensation_failed"},
            )
        case FaultClass.QUEUE_FULL:
            return FaultPlan(
                fault,
                f"the ledger down for {OUTAGE_S:.0f} s from its first request (503, Retry-After "
                f"{OUTAGE_RETRY_AFTER_S} s): every posting queues behind it, paced by its retries",
                ledger_faults={"down": True, "retry_after_s": OUTAGE_RETRY_AFTER_S},
                outage_s=OUTAGE_S,
            )
        case FaultClass.OLD_SCHEMA:
            return FaultPlan(
                fault,
                "half the invoices start on v1; then v2 (with a migration from v1 at the "
                "waits for a person) is deployed: the services restart on it, the runs "
                "waiting there migrate, the rest start on v2",
                deploy_at=0.5,
            )
    raise AssertionError(fault)  # pragma: no cover - every member is matched


def parse_faults(text: str) -> list[FaultClass]:
    """``crash,response_loss`` -> the classes, ``none`` first (every class is compared
    with it); an unknown name is refused with the known ones."""
    from orchestrator.domain.model.errors import InvalidInputError

    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {str(f) for f in FaultClass}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidInputError(
            f"unknown fault class(es): {', '.join(unknown)}; known: {', '.join(FaultClass)}"
        )
    chosen = [FaultClass(n) for n in dict.fromkeys(names)]
    return [FaultClass.NONE] + [f for f in chosen if f is not FaultClass.NONE]


def parse_variants(text: str) -> list[Variant]:
    """``backbone,agent`` -> the variants, in that order; an unknown name is refused."""
    from orchestrator.domain.model.errors import InvalidInputError

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in {str(v) for v in Variant}]
    if unknown or not names:
        raise InvalidInputError(
            f"unknown variant(s): {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(Variant)}"
        )
    return [v for v in Variant if str(v) in names]
