"""Every knob and secret comes from Settings (issue 45, item 1): below the composition root
(``orchestrator/cli``), only ``orchestrator/config/settings.py`` reads the environment, but
for the variables OpenTelemetry and prometheus-client define themselves (telemetry), the
test kit, and the examples, which are applications."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
READS = re.compile(r"\bos\.(environ|getenv)\b")
MAY_READ = {
    "orchestrator/config/settings.py",
    # OTEL_EXPORTER_OTLP_* and PROMETHEUS_MULTIPROC_DIR: the libraries' own variables
    "orchestrator/telemetry/metrics.py",
    "orchestrator/telemetry/prometheus.py",
    "orchestrator/telemetry/tracing.py",
}
OUTSIDE = ("orchestrator/cli/", "orchestrator/testing/", "orchestrator/examples/")


def test_only_settings_read_the_environment_below_the_composition_root() -> None:
    readers = {
        str(path.relative_to(ROOT))
        for package in ("orchestrator", "handlers", "connectors")
        for path in (ROOT / package).rglob("*.py")
        if READS.search(path.read_text(encoding="utf-8"))
    }
    below_root = {p for p in readers if not p.startswith(OUTSIDE)}
    assert below_root == MAY_READ


def test_an_applications_named_secrets_are_read_by_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_WEBHOOK_DOCS_SECRETS", "s1,s2")
    monkeypatch.delenv("KEEL_WEBHOOK_NONE_SECRETS", raising=False)
    wanted = ["KEEL_WEBHOOK_DOCS_SECRETS", "KEEL_WEBHOOK_NONE_SECRETS"]
    assert Settings().named_secrets(wanted) == {"KEEL_WEBHOOK_DOCS_SECRETS": "s1,s2"}
