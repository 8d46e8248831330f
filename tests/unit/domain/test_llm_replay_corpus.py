"""The recorded LLM corpus (tests/llm_histories, ``ops/record_llm_histories.py``) replays
identically with this code: ``invoice_extraction`` v1 (valid, repaired, failed on invalid
output) and v2 (the same, and the human correction task approved with a correction or
rejected). A replay never asks a model: it reads the recorded results.

Runs ``keel replay-check`` as a process, the way CI does; no servers are needed.
"""

from __future__ import annotations

import json

from tests.unit.domain.test_replay_corpus import REPO, replay_check

CORPUS = REPO / "tests" / "llm_histories"
APP = "orchestrator.examples.llm_invoices:app"


def test_the_llm_corpus_replays_identically() -> None:
    done = replay_check("--app", APP, "--histories", str(CORPUS), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["diverged"] == 0 and report["digest_changed"] == 0
    runs = {r["workflow_id"]: r for r in report["reports"]}
    assert all(r["ok"] and r["folded_only"] == 0 for r in runs.values())
    paths = {"v1": ("ok", "repaired", "invalid"), "v2": ("ok", "repaired", "corrected", "rejected")}
    assert set(runs) == {f"llm-{v}-{p}" for v, ps in paths.items() for p in ps}
    versions = {(r["name"], r["version"]) for r in runs.values()}
    assert versions == {("invoice_extraction", 1), ("invoice_extraction", 2)}
