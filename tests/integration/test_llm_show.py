"""Tokens, cost and provenance of a workflow's model calls in ``keel workflow show``.

Real broker and Redis, orchestrator and worker processes, and the local OpenAI-compatible
fake as the provider. The expected numbers come from the nodes' own records in the event
history; the read model must agree with them after the live projector, after a replay of
every event (nothing counts twice) and after a rebuild.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.examples.llm_invoices import app as llm_app
from orchestrator.io.kafka.clients import read_partitions
from orchestrator.projector.projector import Projector
from tests.integration import test_llm_nodes as nodes
from tests.integration.test_llm_nodes import completed_result, events_of, fields
from tests.integration.test_read_model import keel

# The fake provider and the LLM example's services, as test_llm_nodes sets them up.
fake_server = nodes.fake_server
fake = nodes.fake
llm = nodes.llm


def show_json(settings, wf: str) -> dict[str, Any]:
    done = keel(
        settings,
        "workflow",
        "show",
        wf,
        "--json",
        "--app",
        "orchestrator.examples.llm_invoices:app",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_show_sums_tokens_and_cost_and_lists_each_nodes_provenance(settings, llm, fake):
    fake.set_faults(malformed=1)
    fake.script([{"match": "doc-cost", "json": fields()}])
    llm.start("invoice_extraction", {"document": "doc-cost"}, workflow_id="cost-1", version=1)
    assert llm.wait("cost-1", 60).status == "completed"
    rec = completed_result(events_of(settings, "cost-1"))["llm"]
    assert len(rec["calls"]) == 2 and rec["tokens"]["total"] > 0 and rec["cost_usd"] > 0

    usage = show_json(settings, "cost-1")["llm"]
    assert usage["prompt_tokens"] == rec["tokens"]["prompt"]
    assert usage["completion_tokens"] == rec["tokens"]["completion"]
    assert usage["total_tokens"] == rec["tokens"]["total"]
    assert usage["cost_usd"] == pytest.approx(rec["cost_usd"])
    assert (usage["nodes"], usage["calls"], usage["cache_hits"]) == (1, 2, 0)
    (prov,) = usage["provenance"]
    assert prov["activity_type"] == "llm.extract_invoice"
    assert (
        prov["prompt"] == "invoice_extract@1" and prov["prompt_digest"] == rec["prompt"]["digest"]
    )
    assert prov["model"] == "keel-test-model" and prov["cache"] == "off"
    assert prov["request_ids"] == [c["request_id"] for c in rec["calls"]] == ["req-1", "req-2"]

    text = keel(
        settings, "workflow", "show", "cost-1", "--app", "orchestrator.examples.llm_invoices:app"
    )
    assert text.returncode == 0, text.stderr
    assert (
        f"llm: 1 node(s), 2 call(s), tokens prompt={rec['tokens']['prompt']} "
        f"completion={rec['tokens']['completion']} total={rec['tokens']['total']}"
    ) in text.stdout
    assert "llm.extract_invoice" in text.stdout and "invoice_extract@1" in text.stdout


def test_cache_hits_count_and_replays_and_rebuilds_count_nothing_twice(settings, llm, fake):
    fake.script([], default={"json": {"category": "office"}})
    for wf in ("hit-a", "hit-b"):
        llm.start("invoice_classify", {"document": "doc-hit", "data_version": "1"}, wf, 1)
        assert llm.wait(wf, 60).status == "completed"
    assert len(fake.requests()) == 1
    first, second = show_json(settings, "hit-a")["llm"], show_json(settings, "hit-b")["llm"]
    assert first["cache_hits"] == 0 and first["total_tokens"] > 0
    assert second["cache_hits"] == 1 and second["total_tokens"] == 0
    assert second["provenance"][0]["cache"] == "hit"

    # The whole topic again through a fresh live projector: every event is at or below
    # the sequence number the read model holds, so nothing is added.
    projector = Projector(settings, llm_app)
    topic = settings.topic("events")
    records = list(read_partitions(settings, topic, dict.fromkeys(range(settings.partitions), 0)))
    projector.apply(records)
    assert show_json(settings, "hit-a")["llm"] == first
    assert show_json(settings, "hit-b")["llm"] == second

    projector.rebuild()
    assert show_json(settings, "hit-a")["llm"] == first
    assert show_json(settings, "hit-b")["llm"] == second
