"""The application the browser tests drive (tests/browser/test_ui.py): an invoice review
whose first state asks an LLM node for the invoice's category, then waits for a finance
approver's decision of the payment (a human task bound to the operation's digest)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    Context,
    HumanTask,
    KeelApp,
    LlmCall,
    Migration,
    PromptTemplate,
    SearchAttribute,
    SearchKind,
    State,
    Transition,
    WorkflowDefinition,
    prompts,
)

APP = "tests.browser.ui_app:app"
MODEL = "keel-ui-test-model"
app = KeelApp("keel-ui-browser-tests")


class Invoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice_number: str
    supplier: str
    amount: float = Field(gt=0)


class Category(BaseModel):
    """What the model answers for one invoice."""

    schema_version: ClassVar[int] = 1
    model_config = ConfigDict(extra="forbid")
    category: str
    confidence: float = Field(ge=0, le=1)


CLASSIFY_PROMPT = prompts.register(
    PromptTemplate(
        "classify_invoice",
        1,
        system="You classify supplier invoices into spending categories.",
        user="Classify this invoice: $text",
    )
)

classify = LlmCall(
    "classify_invoice",  # activity type llm.classify_invoice
    prompt=CLASSIFY_PROMPT,
    output=Category,
    model=MODEL,
    parameters={"temperature": 0},
    max_repairs=0,
)


def invoice_text(number: str, supplier: str) -> str:
    """The text the model is asked about; the fake model's script matches on it."""
    return f"invoice {number} of {supplier}"


def _text(ctx: Context) -> dict[str, Any]:
    return {"text": invoice_text(ctx.input.invoice_number, ctx.input.supplier)}


def _payment(ctx: Context) -> dict[str, Any]:
    i = ctx.input
    return {"invoice_number": i.invoice_number, "supplier": i.supplier, "amount": i.amount}


def _operation(ctx: Context) -> dict[str, Any]:
    return {"resource": "payments.pay", "arguments": _payment(ctx)}


def _evidence(ctx: Context) -> dict[str, Any]:
    return {"payment": _payment(ctx), "category": ctx.results["classify"]["output"]["category"]}


def _done(outcome: str) -> Any:
    def output(ctx: Context) -> dict[str, Any]:
        task = ctx.human_tasks.get("approve_payment", {})
        return {"outcome": outcome, "decided_by": task.get("actor")}

    output.__qualname__ = f"done_{outcome}"
    return output


def _review(version: int, due_s: int, migrations: list[Migration]) -> WorkflowDefinition:
    """The review; v2 gives the approver half the time, and v1 runs waiting for the
    approval may move to it (the browser test's migration dry run)."""
    return WorkflowDefinition(
        "invoice_review",
        version,
        Invoice,
        [
            State(
                "classify",
                steps=[app.llm_step("classify", classify, input=_text)],
                transitions=[Transition("approval")],
            ),
            State(
                "approval",
                wait=HumanTask(
                    "approve_payment",
                    role="finance-approver",
                    owner="finance-team",
                    operation=_operation,
                    evidence=_evidence,
                    due=due_s,
                    expires=7 * 24 * 3600,
                    on_approve="paid",
                    on_reject="rejected",
                ),
            ),
            State("paid", complete=_done("paid")),
            State("rejected", complete=_done("rejected")),
        ],
        description="Classify an invoice with an LLM node, then a person approves paying it.",
        search_attributes=[
            SearchAttribute(
                "invoice_number", SearchKind.KEYWORD, lambda ctx: ctx.input.invoice_number
            ),
            SearchAttribute("supplier", SearchKind.KEYWORD, lambda ctx: ctx.input.supplier),
            SearchAttribute("amount", SearchKind.NUMBER, lambda ctx: ctx.input.amount),
        ],
        migrations=migrations,
    )


invoice_review = app.workflow(_review(1, 3600, []))
invoice_review_v2 = app.workflow(_review(2, 1800, [Migration(1, states={"approval": "approval"})]))
