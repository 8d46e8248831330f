"""Example LLM workflows on their own application: ``--app orchestrator.examples.llm_invoices:app``.

The model answers come from ``KEEL_LLM_BASE_URL`` (any OpenAI-compatible server; tests
and demos use ``ops/fakes/openai_server.py``) or, with ``KEEL_LLM_PROVIDER=scripted``,
from the file ``KEEL_LLM_SCRIPT``. See docs/llm-nodes.md.

* ``invoice_extraction`` v1: an LLM node extracts the fields of an invoice into the
  versioned ``InvoiceFields`` schema (two repairs at most); a confidence below 0.8 is
  flagged and routed to ``review``, a total above 1000 to ``approval``, the rest to
  ``auto``. Invalid output past the repairs fails the run with the raw output.
* ``invoice_extraction`` v2: the same, but invalid output past the repairs opens the
  human correction task ``correct_extraction`` (role ``invoice-clerk``) with the raw
  outputs, the validation errors and the document as evidence; its approval carries
  the corrected ``InvoiceCorrection``, which is routed on like a valid extraction.
* ``invoice_extraction_confirm`` v1: the same node, then a wait for signal ``confirm``
  before routing (a run that sits after its LLM node, for recovery drills).
* ``invoice_classify`` v1..v4: a cached read-only node; each version changes one part
  of the cache key (v2 the prompt version, v3 the model, v4 a tool version), and the
  input's ``data_version`` is the fourth part.
* ``vendor_check`` v1..v4: a bounded agent that looks vendors up with its tools; v1 stops
  at 3 steps, v2 at a 250-token budget, v3 at a $0.001 budget, v4 at a 1 s deadline.
  v1-v3 return a result flagged ``agent_exhausted`` (routed to ``escalate``); v4 fails.
* ``vendor_check`` v5: v1's bound, but the exhaustion path escalates to a person: the
  human task ``review_vendor`` (role ``vendor-manager``) with the agent's steps and stop
  reason as evidence; an approval trusts the vendor, a rejection fails the run.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    INVALID_OUTPUT,
    AgentCall,
    CachePolicy,
    Context,
    HumanTask,
    KeelApp,
    LlmCall,
    OnInvalid,
    Pricing,
    PromptTemplate,
    RetryPolicy,
    SignalWait,
    State,
    Tool,
    Transition,
    WorkflowDefinition,
    confidence_below,
    has_flag,
    prompts,
)

__all__ = ["app"]

app = KeelApp("keel-llm-examples")

LLM_RETRY = RetryPolicy(
    max_attempts=5, initial_interval_ms=100, backoff_coefficient=2.0, max_interval_ms=2000
)
LARGE_TOTAL = 1000


class InvoiceDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")
    document: str = Field(max_length=20_000)
    data_version: str = "1"


class InvoiceFields(BaseModel):
    """What the model must answer (schema v1)."""

    schema_version: ClassVar[int] = 1
    model_config = ConfigDict(extra="forbid")
    vendor: str
    invoice_number: str
    total: float
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    confidence: float = Field(ge=0, le=1)


EXTRACT_V1 = prompts.register(
    PromptTemplate(
        "invoice_extract",
        1,
        system="You extract fields from invoices. Never guess a total.",
        user="Extract vendor, invoice number, total, currency and your confidence from:\n$document",
    )
)

extract = LlmCall(
    "extract_invoice",
    prompt=EXTRACT_V1,
    output=InvoiceFields,
    model="keel-test-model",
    parameters={"temperature": 0},
    max_repairs=2,
    risk=[confidence_below(0.8)],
    pricing=Pricing(input_per_mtok=0.5, output_per_mtok=1.5),
)


def _document(ctx: Context[InvoiceDocument]) -> dict[str, Any]:
    return {"document": ctx.input_dict["document"]}


def _is_large(ctx: Context[InvoiceDocument]) -> bool:
    return bool(ctx.results["extract"]["output"]["total"] > LARGE_TOTAL)


def _routed(route: str) -> Any:
    def output(ctx: Context[InvoiceDocument]) -> dict[str, Any]:
        fields = ctx.results["extract"]["output"]
        return {"route": route, "total": fields["total"], "vendor": fields["vendor"]}

    output.__qualname__ = f"routed_{route}"
    return output


def _correction_needed(ctx: Context[InvoiceDocument]) -> str:
    return "extraction needs a human correction: " + ctx.failures["extract"]["message"]


ROUTES = [
    Transition("review", when=has_flag("extract", "low_confidence")),
    Transition("approval", when=_is_large),
    Transition("auto"),
]
ENDINGS = [
    State("review", complete=_routed("review")),
    State("approval", complete=_routed("approval")),
    State("auto", complete=_routed("auto")),
    State("needs_correction", fail=_correction_needed),
]

invoice_extraction = app.workflow(
    WorkflowDefinition(
        "invoice_extraction",
        1,
        InvoiceDocument,
        [
            State(
                "extract",
                steps=[app.llm_step("extract", extract, input=_document, retry=LLM_RETRY)],
                transitions=ROUTES,
                on_failure="needs_correction",
            ),
            *ENDINGS,
        ],
        description="Extract an invoice with an LLM node and route it by total and risk.",
    )
)

# ---------------------------------------------------------------------------
# invoice_extraction v2: a human corrects what the model could not answer
# ---------------------------------------------------------------------------


class InvoiceCorrection(BaseModel):
    """What the clerk of a correction task submits: the fields, no confidence."""

    schema_version: ClassVar[int] = 1
    model_config = ConfigDict(extra="forbid")
    vendor: str = Field(min_length=1)
    invoice_number: str = Field(min_length=1)
    total: float = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


#: The same node, but invalid output past the repairs completes flagged (v2's correction path).
extract_or_flag = replace(extract, on_invalid=OnInvalid.FLAG)


def _fields_v2(ctx: Context[InvoiceDocument]) -> dict[str, Any]:
    """The extraction's fields: the human's correction when there is one."""
    task = ctx.human_tasks.get("correct_extraction")
    if task is not None and task["correction"] is not None:
        return dict(task["correction"])
    return dict(ctx.results["extract"]["output"])


def _is_large_v2(ctx: Context[InvoiceDocument]) -> bool:
    return bool(_fields_v2(ctx)["total"] > LARGE_TOTAL)


def _routed_v2(route: str) -> Any:
    def output(ctx: Context[InvoiceDocument]) -> dict[str, Any]:
        fields = _fields_v2(ctx)
        corrected = ctx.human_tasks.get("correct_extraction")
        by = corrected["actor"] if corrected is not None else None
        return {"route": route, "total": fields["total"], "vendor": fields["vendor"], "by": by}

    output.__qualname__ = f"routed_v2_{route}"
    return output


def _correction_operation(ctx: Context[InvoiceDocument]) -> dict[str, Any]:
    record = ctx.results["extract"]["llm"]
    return {
        "resource": "invoice.correct",
        "arguments": {"workflow_id": ctx.workflow_id, "input_digest": record["input_digest"]},
    }


def _correction_evidence(ctx: Context[InvoiceDocument]) -> dict[str, Any]:
    """The raw outputs, the validation errors and the input the model was given."""
    record = ctx.results["extract"]["llm"]
    return {
        "document": ctx.input_dict["document"],
        "raw_outputs": [c["raw_output"] for c in record["calls"]],
        "errors": [c["errors"] for c in record["calls"]],
        "request_ids": [c["request_id"] for c in record["calls"]],
        "schema": record["schema"],
        "prompt": record["prompt"],
        "model": record["model"],
    }


def _not_extracted(ctx: Context[InvoiceDocument]) -> str:
    if "extract" in ctx.failures:
        return "extraction failed: " + ctx.failures["extract"]["message"]
    task = ctx.human_tasks["correct_extraction"]
    return f"the correction was {task['status']} by {task['actor'] or 'nobody'}"


ROUTES_V2 = [
    Transition("approval", when=_is_large_v2),
    Transition("auto"),
]

invoice_extraction_v2 = app.workflow(
    WorkflowDefinition(
        "invoice_extraction",
        2,
        InvoiceDocument,
        [
            State(
                "extract",
                steps=[app.llm_step("extract", extract_or_flag, input=_document, retry=LLM_RETRY)],
                transitions=[
                    Transition("needs_correction", when=has_flag("extract", INVALID_OUTPUT)),
                    Transition("review", when=has_flag("extract", "low_confidence")),
                    *ROUTES_V2,
                ],
                on_failure="not_extracted",
            ),
            State(
                "needs_correction",
                wait=HumanTask(
                    "correct_extraction",
                    role="invoice-clerk",
                    owner="accounts-payable",
                    operation=_correction_operation,
                    evidence=_correction_evidence,
                    on_approve="corrected",
                    on_reject="not_extracted",
                    expires=timedelta(days=3),
                    correction=InvoiceCorrection,
                ),
            ),
            State("corrected", transitions=ROUTES_V2),
            State("review", complete=_routed_v2("review")),
            State("approval", complete=_routed_v2("approval")),
            State("auto", complete=_routed_v2("auto")),
            State("not_extracted", fail=_not_extracted),
        ],
        description=(
            "Extract an invoice with an LLM node; invalid output past the repairs goes to a "
            "human correction task, whose corrected fields are routed like an extraction."
        ),
    )
)

invoice_extraction_confirm = app.workflow(
    WorkflowDefinition(
        "invoice_extraction_confirm",
        1,
        InvoiceDocument,
        [
            State(
                "extract",
                steps=[app.llm_step("extract", extract, input=_document, retry=LLM_RETRY)],
                transitions=[Transition("confirm")],
                on_failure="needs_correction",
            ),
            State(
                "confirm", wait=SignalWait("confirm", timeout=timedelta(days=1)), transitions=ROUTES
            ),
            *ENDINGS,
        ],
        description="Extract an invoice, wait for a confirmation, then route it.",
    )
)

# ---------------------------------------------------------------------------
# invoice_classify: the cache key at work
# ---------------------------------------------------------------------------


class Category(BaseModel):
    schema_version: ClassVar[int] = 1
    category: str


def _vendor_directory(args: dict[str, Any]) -> dict[str, Any]:
    return {"vendor": args.get("vendor"), "known": True}


CLASSIFY_PROMPTS = {
    v: prompts.register(
        PromptTemplate(
            "invoice_classify",
            v,
            user=f"Classify this invoice into a spending category (rules v{v}):\n$document",
        )
    )
    for v in (1, 2)
}
DIRECTORY = {v: Tool("vendor_directory", v, _vendor_directory, "Known vendors.") for v in "12"}


def _classify_workflow(version: int, prompt: int, model: str, tool: str) -> WorkflowDefinition:
    call = LlmCall(
        "classify_invoice",
        prompt=CLASSIFY_PROMPTS[prompt],
        output=Category,
        model=model,
        tools=[DIRECTORY[tool]],
        cache=CachePolicy(ttl_s=3600),
        data_version=_data_version,
    )
    return app.workflow(
        WorkflowDefinition.dag(
            "invoice_classify",
            version,
            InvoiceDocument,
            [app.llm_step("classify", call, input=_document, retry=LLM_RETRY)],
            output=_classified,
            description="Classify an invoice with a cached, read-only LLM node.",
        )
    )


def _data_version(ctx: Context[InvoiceDocument]) -> str:
    return str(ctx.input_dict.get("data_version", "1"))


def _classified(ctx: Context[InvoiceDocument]) -> dict[str, Any]:
    result = ctx.results["classify"]
    return {"category": result["output"]["category"], "cache": result["llm"]["cache"]["status"]}


classify_v1 = _classify_workflow(1, prompt=1, model="keel-test-model", tool="1")
classify_v2 = _classify_workflow(2, prompt=2, model="keel-test-model", tool="1")
classify_v3 = _classify_workflow(3, prompt=2, model="keel-test-model-b", tool="1")
classify_v4 = _classify_workflow(4, prompt=2, model="keel-test-model-b", tool="2")

# ---------------------------------------------------------------------------
# vendor_check: a bounded agent
# ---------------------------------------------------------------------------


class VendorQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vendor: str


class VendorVerdict(BaseModel):
    schema_version: ClassVar[int] = 1
    vendor: str
    trusted: bool


def _registry_lookup(q: VendorQuery) -> dict[str, Any]:
    return {"vendor": q.vendor, "registered": q.vendor.lower().startswith("acme")}


def _sanctions_lookup(q: VendorQuery) -> dict[str, Any]:
    return {"vendor": q.vendor, "listed": False}


VENDOR_TOOLS = [
    Tool("registry_lookup", "1", _registry_lookup, "Company registry.", input=VendorQuery),
    Tool("sanctions_lookup", "1", _sanctions_lookup, "Sanctions list.", input=VendorQuery),
]
VENDOR_PROMPT = prompts.register(
    PromptTemplate(
        "vendor_check",
        1,
        system="Decide whether a vendor can be trusted. Use the tools; answer when sure.",
        user="Vendor: $vendor",
    )
)


def _vendor(ctx: Context[VendorQuery]) -> dict[str, Any]:
    return {"vendor": ctx.input_dict["vendor"]}


def _verdict(ctx: Context[VendorQuery]) -> dict[str, Any]:
    result = ctx.results["check"]
    return {
        "verdict": result["output"],
        "stop_reason": result["llm"]["stop_reason"],
        "flags": result["flags"],
    }


def _vendor_workflow(
    version: int, escalation: list[State] | None = None, **bounds: Any
) -> WorkflowDefinition:
    """``escalation``: the states of the exhaustion path (default: end with the verdict)."""
    agent = AgentCall(
        "vendor_check",
        prompt=VENDOR_PROMPT,
        output=VendorVerdict,
        tools=VENDOR_TOOLS,
        model="keel-test-model",
        pricing=Pricing(input_per_mtok=10.0, output_per_mtok=30.0),
        **bounds,
    )
    step = app.llm_step("check", agent, input=_vendor, retry=LLM_RETRY)
    return app.workflow(
        WorkflowDefinition(
            "vendor_check",
            version,
            VendorQuery,
            [
                State(
                    "check",
                    steps=[step],
                    transitions=[
                        Transition("escalate", when=has_flag("check", "agent_exhausted")),
                        Transition("done"),
                    ],
                    on_failure="failed",
                ),
                *(escalation or [State("escalate", complete=_verdict)]),
                State("done", complete=_verdict),
                State("failed", fail=_agent_failed),
            ],
            description="A bounded agent checks a vendor with two lookup tools.",
        )
    )


def _agent_failed(ctx: Context[VendorQuery]) -> str:
    return "vendor check failed: " + ctx.failures["check"]["message"]


vendor_v1 = _vendor_workflow(1, max_steps=3, on_exhausted="flag")
vendor_v2 = _vendor_workflow(2, max_steps=20, max_tokens=250, on_exhausted="flag")
vendor_v3 = _vendor_workflow(3, max_steps=20, max_cost_usd=0.001, on_exhausted="flag")
vendor_v4 = _vendor_workflow(4, max_steps=20, deadline_s=1.0, on_exhausted="fail")


def _vendor_operation(ctx: Context[VendorQuery]) -> dict[str, Any]:
    return {"resource": "vendor.trust", "arguments": {"vendor": ctx.input_dict["vendor"]}}


def _agent_evidence(ctx: Context[VendorQuery]) -> dict[str, Any]:
    """What the agent did before it ran out: its stop reason, steps and refusals."""
    record = ctx.results["check"]["llm"]
    return {
        "vendor": ctx.input_dict["vendor"],
        "stop_reason": record["stop_reason"],
        "steps": record["steps"],
        "refused_tools": record.get("refused_tools", []),
        "partial_verdict": ctx.results["check"]["output"],
    }


def _decided_by_person(ctx: Context[VendorQuery]) -> dict[str, Any]:
    task = ctx.human_tasks["review_vendor"]
    return {"vendor": ctx.input_dict["vendor"], "trusted": True, "by": task["actor"]}


def _refused_by_person(ctx: Context[VendorQuery]) -> str:
    task = ctx.human_tasks["review_vendor"]
    return f"vendor refused by {task['actor'] or 'nobody'} ({task['status']})"


vendor_v5 = _vendor_workflow(
    5,
    escalation=[
        State(
            "escalate",
            wait=HumanTask(
                "review_vendor",
                role="vendor-manager",
                owner="procurement",
                operation=_vendor_operation,
                evidence=_agent_evidence,
                on_approve="trusted_by_person",
                on_reject="refused",
                expires=timedelta(days=2),
            ),
        ),
        State("trusted_by_person", complete=_decided_by_person),
        State("refused", fail=_refused_by_person),
    ],
    max_steps=3,
    on_exhausted="flag",
)
