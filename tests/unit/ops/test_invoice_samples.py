"""The committed sample invoices are ``ops.invoices.invoice_samples``' output, and they hold what
the pipeline's rules expect of each scenario."""

from __future__ import annotations

import json
from pathlib import Path

from ops.invoices.invoice_samples import Scenario, samples, write
from orchestrator.examples.invoice_pipeline import pipeline_rules as rules

COMMITTED = Path(__file__).resolve().parents[3] / "ops" / "demo_data" / "invoices"


def test_the_committed_samples_are_the_generators_output(tmp_path: Path) -> None:
    written = {p.name: p.read_text() for p in write(tmp_path)}
    committed = {p.name: p.read_text() for p in COMMITTED.iterdir()}
    assert committed == written
    assert len([n for n in committed if n.endswith(".txt")]) >= 30


def test_each_scenario_meets_the_rules_as_it_should() -> None:
    for s in samples():
        found = rules.problems(s.fields())
        if s.scenario is Scenario.BAD_TOTALS:
            assert found == ["line items add up to 200.00, not the net 220.00"]
        elif s.scenario is Scenario.UNKNOWN_SUPPLIER:
            assert found == ["supplier 'Globex Consulting' is not a known supplier"]
        else:
            assert found == [], (s.file_name, found)
        large = s.total > rules.APPROVAL_THRESHOLD
        approval = (Scenario.APPROVE, Scenario.REJECT, Scenario.STALE, Scenario.EXPIRE)
        assert large is (s.scenario in approval), s.file_name


def test_every_correction_passes_the_rules() -> None:
    manifest = json.loads((COMMITTED / "manifest.json").read_text())
    corrections = [m["correction"] for m in manifest if m["correction"] is not None]
    assert len(corrections) == 3
    for c in corrections:
        assert rules.problems(c) == []
