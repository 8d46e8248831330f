"""docker-compose.yml parses and speaks Keel's settings, not invented variable names."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.settings import Settings

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def _keel_vars(node: object) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.startswith("KEEL_"):
                found.add(key)
            found |= _keel_vars(value)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, str) and item.startswith("KEEL_") and "=" in item:
                found.add(item.split("=", 1)[0])
            found |= _keel_vars(item)
    return found


def test_compose_parses_and_uses_only_known_settings():
    doc = yaml.safe_load(COMPOSE.read_text())
    assert {"kafka", "redis"} <= set(doc["services"])
    kafka_env = doc["services"]["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    used = _keel_vars(doc)
    known = {f"KEEL_{name.upper()}" for name in Settings.model_fields}
    assert used, "compose passes no KEEL_* settings to the services"
    assert used <= known, f"unknown settings in compose: {sorted(used - known)}"
