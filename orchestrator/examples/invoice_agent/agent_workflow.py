"""``invoice_agent`` v1: the invoice pipeline's all-agent counterpart (docs/invoice-pipeline.md,
"The all-agent variant").

agent (ONE bounded agent: reads the document, checks the supplier and for a duplicate,
asks the approvals desk above the pipeline's threshold, posts, schedules the payment and
reverses the posting if the payment is refused) → done (its answer, with the posting id
read from its recorded ``post_invoice`` result) | gave_up (a bound reached, or the model
unreachable: the run fails with the reason) | unsupported (it says ``posted`` but no
posting is in its record: the run fails).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    AgentCall,
    Context,
    Pricing,
    PromptTemplate,
    RetryPolicy,
    SearchAttribute,
    SearchKind,
    State,
    Transition,
    WorkflowDefinition,
    prompts,
)
from orchestrator.examples.invoice_agent.agent_app import app
from orchestrator.examples.invoice_agent.agent_tools import TOOLS
from orchestrator.examples.invoice_pipeline import pipeline_rules as rules
from orchestrator.examples.invoice_pipeline.pipeline_models import InvoiceFile

__all__ = ["AGENT", "invoice_agent"]

#: What every agent prompt starts with: the scripted model tells the agent's requests
#: from the pipeline's extraction requests by it (``ops/invoices/agent_script.py``).
MARKER = "[agent]"


class AgentVerdict(BaseModel):
    """The agent's final answer (schema v1): how the invoice ended, and why."""

    schema_version: ClassVar[int] = 1
    model_config = ConfigDict(extra="forbid")
    outcome: Literal["posted", "rejected", "duplicate", "compensated"]
    reason: str = Field(min_length=1, max_length=2000)


PROMPT = prompts.register(
    PromptTemplate(
        "invoice_agent",
        1,
        system=(
            "You are the accounts-payable agent. For one invoice file: read the supplier, "
            "invoice number, currency and total from the document (copy amounts exactly). "
            "Call check_supplier and find_duplicate first. Reject an unknown supplier; stop "
            "a duplicate. Above a total of "
            f"{rules.APPROVAL_THRESHOLD:.2f} call request_approval and post only if approved. "
            "Then post_invoice, then schedule_payment. If the payment is refused, call "
            "reverse_posting and answer compensated. If a tool fails, you may try it again. "
            "Answer with the outcome (posted, rejected, duplicate or compensated) and a reason."
        ),
        user=f"{MARKER} file $file_name\n$document",
    )
)

AGENT = AgentCall(
    "invoice_agent",
    prompt=PROMPT,
    output=AgentVerdict,
    tools=TOOLS,
    model="keel-invoice-model",
    parameters={"temperature": 0},
    max_steps=8,
    max_tokens=20_000,
    max_cost_usd=0.05,
    deadline_s=120,
    on_exhausted="fail",
    pricing=Pricing(input_per_mtok=0.5, output_per_mtok=1.5),
)

LLM_RETRY = RetryPolicy(
    max_attempts=5, initial_interval_ms=200, backoff_coefficient=2.0, max_interval_ms=3000
)


def _agent_input(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    return {"file_name": ctx.input_dict["file_name"], "document": ctx.input_dict["document"]}


def _tool_results(ctx: Context[InvoiceFile], tool: str) -> list[dict[str, Any]]:
    """The recorded results of every call of ``tool`` the agent made, in order."""
    steps = ctx.results["agent"]["llm"]["steps"]
    return [
        r["result"]
        for s in steps
        for r in s.get("tool_results", [])
        if r["tool"] == tool and isinstance(r.get("result"), dict)
    ]


def _posting_id(ctx: Context[InvoiceFile]) -> str | None:
    posted = [r for r in _tool_results(ctx, "post_invoice") if r.get("posted")]
    return str(posted[-1]["posting_id"]) if posted else None


def _unsupported(ctx: Context[InvoiceFile]) -> bool:
    """The agent says it posted (or reversed a posting) but its record holds no posting."""
    claimed = ctx.results["agent"]["output"]["outcome"] in ("posted", "compensated")
    return claimed and _posting_id(ctx) is None


def _done(ctx: Context[InvoiceFile]) -> dict[str, Any]:
    result = ctx.results["agent"]
    verdict = result["output"]
    approvals = [r for r in _tool_results(ctx, "request_approval") if r.get("approved")]
    out: dict[str, Any] = {
        "outcome": verdict["outcome"],
        "reason": verdict["reason"],
        "file_name": ctx.input_dict["file_name"],
        "steps": len(result["llm"]["steps"]),
        "stop_reason": result["llm"]["stop_reason"],
    }
    if verdict["outcome"] in ("posted", "compensated"):
        out["posting_id"] = _posting_id(ctx)
        out["approved_by"] = approvals[-1]["approver"] if approvals else None
    return out


def _gave_up(ctx: Context[InvoiceFile]) -> str:
    return "the invoice agent gave up: " + ctx.failures["agent"]["message"]


def _unsupported_reason(ctx: Context[InvoiceFile]) -> str:
    outcome = ctx.results["agent"]["output"]["outcome"]
    return f"the invoice agent answered {outcome} but its record holds no ledger posting"


invoice_agent = app.workflow(
    WorkflowDefinition(
        "invoice_agent",
        1,
        InvoiceFile,
        [
            State(
                "agent",
                steps=[app.llm_step("agent", AGENT, input=_agent_input, retry=LLM_RETRY)],
                transitions=[Transition("unsupported", when=_unsupported), Transition("done")],
                on_failure="gave_up",
            ),
            State("done", complete=_done),
            State("gave_up", fail=_gave_up),
            State("unsupported", fail=_unsupported_reason),
        ],
        search_attributes=(
            SearchAttribute(
                "file_name", SearchKind.KEYWORD, lambda ctx: ctx.input_dict["file_name"]
            ),
        ),
        description="One invoice file handled end to end by one bounded agent with tools.",
    )
)
