"""The product's hot paths hold no test branch (issue 45): faults are adapter hooks
(orchestrator/io/adapter_hooks.py, ops/faults/), never a switch the services read."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_SWITCH = re.compile(r"seeded_bug|test_pause|pause_after|TEST ONLY|SeededBug", re.IGNORECASE)


def test_no_service_reads_a_test_switch() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in (
            "orchestrator/engine",
            "handlers",
            "connectors",
            "orchestrator/config/settings.py",
        )
        for path in sorted(
            (ROOT / folder).rglob("*.py") if (ROOT / folder).is_dir() else [ROOT / folder]
        )
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if TEST_SWITCH.search(line)
    ]
    assert found == []
