"""``invoice_pipeline`` v1: one invoice file from receipt to a reconciled posting
(docs/invoice-pipeline.md; the reference text's invoice pipeline).

extract (LLM node, bounded repairs) → [invalid or unsure: correct (a clerk)] → validate
(deterministic rules and a recorded duplicate lookup) → [a failed rule: correct; a
duplicate: stop] → [above the threshold: approval bound to the posting's digest] → post
(ledger, idempotent, status query on an unknown outcome; reversed if what follows fails
for good) with notify and schedule_payment after it → reconcile (the ledger's own record
against the run's) → posted.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from orchestrator import (
    INVALID_OUTPUT,
    Compensation,
    Context,
    Escalation,
    HumanTask,
    LlmCall,
    OnExpiry,
    OnInvalid,
    Pricing,
    PromptTemplate,
    RetryPolicy,
    SearchAttribute,
    SearchKind,
    State,
    Step,
    Transition,
    WorkflowDefinition,
    confidence_below,
    has_flag,
    prompts,
)
from orchestrator.examples.invoice_pipeline import pipeline_rules as rules
from orchestrator.examples.invoice_pipeline.pipeline_app import app
from orchestrator.examples.invoice_pipeline.pipeline_models import (
    InvoiceCorrection,
    InvoiceFields,
    InvoiceFile,
)

__all__ = ["invoice_pipeline"]

#: An extraction the model is less sure of than this goes to a clerk.
MIN_CONFIDENCE = 0.8

EXTRACT = prompts.register(
    PromptTemplate(
        "invoice_pipeline_extract",
        1,
        system=(
            "You extract invoices into JSON. Copy amounts exactly; never compute or guess one. "
            "Give your confidence from 0 to 1."
        ),
        user=(
            "Extract supplier, invoice_number, date (YYYY-MM-DD), currency, net, tax, total, "
            "line_items (description, amount) and confidence from this invoice:\n$document"
        ),
    )
)

extract = LlmCall(
    "extract_invoice_fields",
    prompt=EXTRACT,
    output=InvoiceFields,
    model="keel-invoice-model",
    parameters={"temperature": 0},
    max_repairs=2,
    on_invalid=OnInvalid.FLAG,
    risk=[confidence_below(MIN_CONFIDENCE)],
    pricing=Pricing(input_per_mtok=0.5, output_per_mtok=1.5),
)

LLM_RETRY = RetryPolicy(
    max_attempts=5, initial_interval_ms=200, backoff_coefficient=2.0, max_interval_ms=3000
)
LEDGER_RETRY = RetryPolicy(
    max_attempts=6, initial_interval_ms=200, backoff_coefficient=2.0, max_interval_ms=3000
)
#: A notification is retried on its own, for longer: the posting stands either way.
NOTIFY_RETRY = RetryPolicy(
    max_attempts=10, initial_interval_ms=200, backoff_coefficient=2.0, max_interval_ms=5000
)


def fields(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    """The invoice's fields: the latest clerk's correction when there is one, else what
    the model extracted (without its confidence)."""
    task = ctx.human_tasks.get("correct_invoice")
    if task is not None and task["correction"] is not None:
        return dict(task["correction"])
    out = dict(ctx.results["extract"]["output"])
    out.pop("confidence", None)
    return out


def _has_fields(ctx: Context[InvoiceFile]) -> bool:
    task = ctx.human_tasks.get("correct_invoice")
    return (task is not None and task["correction"] is not None) or (
        "extract" in ctx.results and not has_flag("extract", INVALID_OUTPUT)(ctx)
    )


def posting(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    """The exact ledger posting this run makes: what an approver approves, by digest."""
    f = fields(ctx)
    return {
        "ledger_key": f"invoice/{rules.invoice_key(f)}",
        "invoice_id": ctx.workflow_id,
        "supplier": f["supplier"],
        "invoice_number": f["invoice_number"],
        "currency": f["currency"],
        "amount": f["total"],
    }


def _document(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    return {"document": ctx.input_dict["document"]}


def _why_correct(ctx: Context[InvoiceFile]) -> list[str]:
    if has_flag("extract", INVALID_OUTPUT)(ctx) and ctx.human_tasks.get("correct_invoice") is None:
        return ["the model's output stayed invalid after its repairs"]
    if "lookup" not in ctx.results:
        return [f"the model's confidence was below {MIN_CONFIDENCE}"]
    return rules.problems(fields(ctx))


def _correction_operation(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    """What a clerk's decision is bound to: this file's fields. (Why it needs a person is
    evidence: it is computed when the task opens and must not move the digest.)"""
    return {"resource": "invoice.correct", "arguments": {"invoice_id": ctx.workflow_id}}


def _correction_evidence(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    record = ctx.results.get("extract", {}).get("llm", {})
    return {
        "file_name": ctx.input_dict["file_name"],
        "document": ctx.input_dict["document"],
        "why": _why_correct(ctx),
        "extracted": fields(ctx) if _has_fields(ctx) else None,
        "raw_outputs": [c["raw_output"] for c in record.get("calls", [])],
    }


def _lookup(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    return {"invoice_key": rules.invoice_key(fields(ctx)), "workflow_id": ctx.workflow_id}


def _duplicate_of(ctx: Context[InvoiceFile]) -> str | None:
    return ctx.results["lookup"]["duplicate_of"]  # type: ignore[no-any-return]


def _fails_rules(ctx: Context[InvoiceFile]) -> bool:
    return bool(rules.problems(fields(ctx)))


def _needs_approval(ctx: Context[InvoiceFile]) -> bool:
    return bool(fields(ctx)["total"] > rules.APPROVAL_THRESHOLD)


def _sla(name: str) -> Any:
    def duration(ctx: Context[InvoiceFile]) -> timedelta:
        return timedelta(seconds=float(ctx.input_dict["sla"][name]))

    duration.__qualname__ = f"sla_{name}"
    return duration


def _approval_operation(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    return {"resource": "ledger.post", "arguments": posting(ctx)}


def _approval_evidence(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    return {"file_name": ctx.input_dict["file_name"], "fields": fields(ctx)}


def _payment(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    p = posting(ctx)
    return {
        "posting_id": ctx.results["post"]["posting_id"],
        "supplier": p["supplier"],
        "currency": p["currency"],
        "amount": p["amount"],
    }


def _notice(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    return {"posting_id": ctx.results["post"]["posting_id"], "invoice_id": ctx.workflow_id}


def _reconcile_input(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    return {"posting": posting(ctx), "posting_id": ctx.results["post"]["posting_id"]}


def _reversal(result: dict[str, Any]) -> dict[str, Any]:
    return {"posting_id": result["posting_id"], "ledger_key": result["ledger_key"]}


def _outcome(kind: str) -> Any:
    def output(ctx: Context[InvoiceFile]) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": kind, "file_name": ctx.input_dict["file_name"]}
        if kind == "posted":
            out |= {
                "posting_id": ctx.results["post"]["posting_id"],
                "amount": fields(ctx)["total"],
                "supplier": fields(ctx)["supplier"],
                "approved_by": (ctx.human_tasks.get("approve_posting") or {}).get("actor"),
            }
        elif kind == "duplicate":
            out["reason"] = f"a duplicate of invoice run {_duplicate_of(ctx)}"
        elif kind == "mismatch":
            out["reason"] = "; ".join(ctx.results["reconcile"]["problems"])
        else:
            decided = ctx.human_tasks.get("approve_posting") or ctx.human_tasks.get(
                "correct_invoice", {}
            )
            out["reason"] = (
                f"{decided.get('status', 'rejected')} by {decided.get('actor') or 'nobody'}"
            )
        return out

    output.__qualname__ = f"outcome_{kind}"
    return output


def _matches(ctx: Context[InvoiceFile]) -> bool:
    return bool(ctx.results["reconcile"]["matches"])


SEARCH = (
    SearchAttribute("file_name", SearchKind.KEYWORD, lambda ctx: ctx.input_dict["file_name"]),
    SearchAttribute(
        "invoice_key",
        SearchKind.KEYWORD,
        lambda ctx: rules.invoice_key(fields(ctx)) if "lookup" in ctx.results else None,
    ),
    SearchAttribute(
        "supplier",
        SearchKind.KEYWORD,
        lambda ctx: fields(ctx)["supplier"] if _has_fields(ctx) else None,
    ),
    SearchAttribute(
        "amount", SearchKind.NUMBER, lambda ctx: fields(ctx)["total"] if _has_fields(ctx) else None
    ),
)

invoice_pipeline = app.workflow(
    WorkflowDefinition(
        "invoice_pipeline",
        1,
        InvoiceFile,
        [
            State(
                "extract",
                steps=[app.llm_step("extract", extract, input=_document, retry=LLM_RETRY)],
                transitions=[
                    Transition("correct", when=has_flag("extract", INVALID_OUTPUT)),
                    Transition("correct", when=has_flag("extract", "low_confidence")),
                    Transition("validate"),
                ],
            ),
            State(
                "correct",
                wait=HumanTask(
                    "correct_invoice",
                    role="invoice-clerk",
                    owner="accounts-payable",
                    operation=_correction_operation,
                    evidence=_correction_evidence,
                    correction=InvoiceCorrection,
                    expires=_sla("expires_after_s"),
                    on_expiry=OnExpiry.REJECT,
                    on_approve="validate",
                    on_reject="rejected",
                ),
            ),
            State(
                "validate",
                steps=[Step("lookup", "find_duplicate_invoice", input=_lookup)],
                transitions=[
                    Transition("duplicate", when=lambda ctx: _duplicate_of(ctx) is not None),
                    Transition("correct", when=_fails_rules),
                    Transition("approval", when=_needs_approval),
                    Transition("post"),
                ],
            ),
            State(
                "approval",
                wait=HumanTask(
                    "approve_posting",
                    role="finance-approver",
                    owner="finance-team",
                    operation=_approval_operation,
                    evidence=_approval_evidence,
                    due=_sla("due_s"),
                    escalations=[
                        Escalation(
                            _sla("escalate_after_s"), owner="finance-lead", role="finance-lead"
                        )
                    ],
                    expires=_sla("expires_after_s"),
                    on_expiry=OnExpiry.REJECT,
                    on_approve="post",
                    on_reject="rejected",
                ),
            ),
            State(
                "post",
                steps=[
                    Step(
                        "post",
                        "post_invoice",
                        input=posting,
                        retry=LEDGER_RETRY,
                        start_to_close=timedelta(seconds=5),
                        status_query="invoice_posting_status",
                        compensation=Compensation("reverse_posting", input=_reversal),
                        on_exhausted="fail",
                    ),
                    Step(
                        "notify", "notify_supplier", after="post", input=_notice, retry=NOTIFY_RETRY
                    ),
                    Step(
                        "pay",
                        "schedule_payment",
                        after="post",
                        input=_payment,
                        retry=LEDGER_RETRY,
                        on_exhausted="fail",
                    ),
                ],
                transitions=[Transition("reconcile")],
            ),
            State(
                "reconcile",
                steps=[Step("reconcile", "reconcile_posting", input=_reconcile_input)],
                transitions=[Transition("posted", when=_matches), Transition("mismatch")],
            ),
            State("posted", complete=_outcome("posted")),
            State("duplicate", complete=_outcome("duplicate")),
            State("rejected", complete=_outcome("rejected")),
            State("mismatch", complete=_outcome("mismatch")),
        ],
        search_attributes=SEARCH,
        description="One invoice file from receipt to a reconciled ledger posting.",
    )
)
