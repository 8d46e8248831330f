"""The all-agent variant's scripted model (``ops/invoices/agent_script.py``), without servers:
played the way ``ops/fakes/openai_server.py`` matches (first unused entry whose ``match``
occurs in the JSON of the messages), against a world that answers the tools as the fakes
would, every sample's conversation ends in the outcome the pipeline's sample names; and in
a script serving both variants, no agent entry answers a pipeline request and the agent's
requests are answered by its own entries."""

from __future__ import annotations

import json
from typing import Any

from ops.invoices.agent_script import agent_input, agent_model_script, both_scripts
from ops.invoices.invoice_samples import Sample, Scenario, samples
from orchestrator.examples.invoice_agent import agent_tools as tools
from orchestrator.examples.invoice_agent.agent_workflow import AGENT, MARKER, PROMPT
from orchestrator.examples.invoice_pipeline.pipeline_models import file_digest
from orchestrator.examples.invoice_pipeline.pipeline_workflow import EXTRACT

REFUSED = "Fjord Legal Partners"


def _take(script: list[dict[str, Any]], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The fake's rule: the first entry whose match is in the messages, used once."""
    text = json.dumps(messages)
    for i, entry in enumerate(script):
        if entry.get("match") is None or entry["match"] in text:
            if int(entry.get("repeat", 1)) <= 1:
                script.pop(i)
            else:
                entry["repeat"] = int(entry["repeat"]) - 1
            return entry
    raise AssertionError(f"no scripted answer for {text[-300:]!r}")


class World:
    """The ledger and accounts payable as the tools would find them."""

    def __init__(self) -> None:
        self.postings: dict[str, dict[str, Any]] = {}

    def run(self, run: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        n = args["invoice_number"]
        key = tools.ledger_key(args["supplier"], n)
        found = self.postings.get(key)
        if name == "check_supplier":
            return tools.check_supplier(tools.SupplierQuery(**args))
        if name == "request_approval":
            return tools.request_approval(tools.Invoice(**args))
        if name == "find_duplicate":
            if found is None:
                return {"summary": f"{n}: not posted yet"}
            if found["run"] == run:
                return {"summary": f"{n}: posted by this run as {found['id']}"}
            return {"summary": f"{n}: already posted by invoice run {found['run']}"}
        if name == "post_invoice":
            found = found or {"id": f"p-{len(self.postings) + 1:06d}", "run": run}
            self.postings[key] = found | {"amount": args["amount"]}
            return {
                "posted": True,
                "posting_id": found["id"],
                "summary": f"{n}: posted as {found['id']}",
            }
        if name == "schedule_payment":
            if args["supplier"] == REFUSED:
                return {"summary": f"{n}: payment refused (422): payments to {REFUSED} are blocked"}
            return {"summary": f"{n}: payment scheduled as pay-000001"}
        assert name == "reverse_posting" and found is not None
        found["reversed"] = True
        return {"summary": f"{n}: posting {found['id']} reversed"}


def _converse(script: list[dict[str, Any]], world: World, s: Sample) -> tuple[str, list[str]]:
    body = agent_input(s)
    messages: list[dict[str, Any]] = PROMPT.render(body)
    called: list[str] = []
    for _ in range(AGENT.max_steps):
        entry = _take(script, messages)
        if "json" in entry:
            return entry["json"]["outcome"], called
        if "content" in entry:  # invalid: the repair message comes back
            messages += [{"role": "assistant", "content": entry["content"]}, {"role": "user"}]
            continue
        messages.append({"role": "assistant", "tool_calls": entry["tool_calls"]})
        for call in entry["tool_calls"]:
            called.append(call["name"])
            result = world.run(body["sha256"], call["name"], call["arguments"])
            messages.append({"role": "tool", "content": json.dumps({"result": result})})
    return "exhausted", called


def test_every_sample_ends_as_the_pipelines_sample_says() -> None:
    items = samples(extra=4)
    script = agent_model_script(items)
    world = World()
    for s in items:
        outcome, called = _converse(script, world, s)
        assert outcome == s.expected, (s.file_name, called)
        if s.total > 1000 and s.expected != "duplicate":
            assert "request_approval" in called
        if s.scenario is Scenario.PAYMENT_FAILS:
            assert called[-1] == "reverse_posting"
    posted = [s for s in items if s.expected in ("posted", "compensated")]
    assert len(world.postings) == len({s.number for s in posted})


def test_the_agents_entries_never_answer_a_pipeline_request() -> None:
    items = samples()
    agent = agent_model_script(items)
    for s in items:
        pipeline_request = json.dumps(EXTRACT.render({"document": s.document()}))
        assert MARKER not in pipeline_request
        assert [e["match"] for e in agent if e["match"] in pipeline_request] == []


def test_in_one_script_the_agents_first_request_gets_its_own_entry() -> None:
    items = samples()
    script = both_scripts(items)
    for s in items:
        entry = _take(script, PROMPT.render(agent_input(s)))
        assert [c["name"] for c in entry["tool_calls"]] == ["check_supplier", "find_duplicate"]
        assert entry["match"] == f"{MARKER} file {s.file_name}"


def test_the_input_is_the_pipelines_for_the_file() -> None:
    s = samples()[0]
    body = agent_input(s)
    assert body["sha256"] == file_digest(s.document()) and body["file_name"] == s.file_name
