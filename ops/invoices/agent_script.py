"""The all-agent variant's input and scripted model (docs/invoice-pipeline.md, "The
all-agent variant"): ``invoice_agent`` runs on the same sample invoices as the pipeline.

:func:`agent_model_script` gives ``ops/fakes/openai_server.py`` the answers of a
competent agent, one set per sample. The fake answers a request with the first unused
entry whose ``match`` occurs in the request's messages, and an agent's request carries
the whole conversation so far. So each entry matches a text only one stage of the
conversation holds (a tool result's ``summary``, which names the invoice number), the
entries of later stages come first, and each answers several times (``repeat``): the
answer depends on what the tools said, not on how many calls came before, so a tool
error asked again, or a second file of one invoice, gets the answer a model would give.
The first stage matches the agent's prompt (``[agent] file <file name>``).

The pipeline's entries match on the bare invoice number, which the agent's prompt (the
document) holds too: in a script serving both, the agent's entries go first
(:func:`both_scripts`); none of them matches a pipeline request.
"""

from __future__ import annotations

from typing import Any

from ops.invoices.invoice_samples import Sample, Scenario, model_script
from orchestrator.examples.invoice_agent.agent_workflow import MARKER
from orchestrator.examples.invoice_pipeline import pipeline_rules as rules
from orchestrator.examples.invoice_pipeline.pipeline_models import submission

__all__ = ["agent_input", "agent_model_script", "both_scripts"]

#: How often an entry may answer: the runs of one invoice, and a tool tried again.
REPEAT = 10


def agent_input(sample: Sample) -> dict[str, Any]:
    """The input of ``invoice_agent`` for ``sample``: what the pipeline's intake builds for
    the file (``InvoiceFile``); its ``sha256`` is the workflow id."""
    return submission(sample.file_name, sample.document())[1]


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "arguments": args}


def _answer(outcome: str, reason: str) -> dict[str, Any]:
    return {"json": {"outcome": outcome, "reason": reason}}


def _entries(s: Sample) -> list[dict[str, Any]]:
    """A competent agent's answers for ``s``, the latest stage of the conversation first."""
    n = s.number
    who = {"supplier": s.supplier, "invoice_number": n}
    invoice = {**who, "currency": s.currency, "amount": s.total}
    post = {"tool_calls": [_call("post_invoice", invoice)]}
    after_checks = (
        {"tool_calls": [_call("request_approval", invoice)]}
        if s.total > rules.APPROVAL_THRESHOLD
        else post
    )
    stages: list[tuple[str, dict[str, Any]]] = [
        (f"{n}: posting ", _answer("compensated", "payment refused; the posting was reversed")),
        (f"{n}: payment scheduled as", _answer("posted", "posted and the payment scheduled")),
        (f"{n}: payment refused", {"tool_calls": [_call("reverse_posting", who)]}),
        (f"{n}: posted as", {"tool_calls": [_call("schedule_payment", invoice)]}),
        (f"{n}: approval refused", _answer("rejected", "the approvals desk refused it")),
        (f"{n}: approved by", post),
        (f"{n}: supplier {s.supplier} is not a known", _answer("rejected", "unknown supplier")),
        (f"{n}: already posted by invoice run", _answer("duplicate", "another file was posted")),
        (f"{n}: posted by this run", {"tool_calls": [_call("schedule_payment", invoice)]}),
        (f"{n}: not posted yet", after_checks),
        (
            f"{MARKER} file {s.file_name}",
            {"tool_calls": [_call("check_supplier", who), _call("find_duplicate", who)]},
        ),
    ]
    tokens = {"prompt_tokens": 420 + len(s.lines) * 12, "completion_tokens": 60}
    return [{"match": m, **answer, "repeat": REPEAT, **tokens} for m, answer in stages]


def agent_model_script(items: list[Sample]) -> list[dict[str, Any]]:
    """The scripted model's answers for ``invoice_agent`` runs of ``items`` (the entries of
    ``POST /script``; :func:`both_scripts` for a model serving the pipeline too).

    A repaired extraction (``repair``) answers malformed once before its final answer,
    as the pipeline's script does; the other scenarios' model is competent and sure."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for s in items:
        entries = _entries(s)
        if s.number in seen:  # a second file of one invoice: only its first stage differs
            entries = entries[-1:]
        seen.add(s.number)
        if s.scenario is Scenario.REPAIR:
            final = f"{s.number}: payment scheduled as"
            out.append({"match": final, "content": "Sure! The invoice was posted: {outcome: "})
        out += entries
    return out


def both_scripts(items: list[Sample]) -> list[dict[str, Any]]:
    """One script for the agent's runs and the pipeline's of ``items``: the agent's first."""
    return [*agent_model_script(items), *model_script(items)["responses"]]
