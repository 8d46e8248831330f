"""docs/schedules.md runs as written: its Python example and its CLI lines against a real
orchestrator and worker, the output the page shows (a new user's first schedule)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.schedules.spec import ScheduleSpec, next_fire, tick_iso
from tests.doc_blocks import snippets
from tests.support import run_doc_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"


def _keel(settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=settings.child_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_the_schedules_page_runs_as_written(settings, services) -> None:
    services.start("orchestrator")
    services.start("worker")
    (code,) = [s.code for s in snippets(PAGE) if s.is_python]
    first, listed = run_doc_block(settings, code)
    spec = ScheduleSpec(name="n", workflow="w", cron="0 2 * * *", timezone="Europe/Paris")
    now = int(datetime.now(UTC).timestamp() * 1000)
    one = next_fire(spec, now)
    assert first == f"active {[tick_iso(one), tick_iso(next_fire(spec, one))]}"
    assert listed == "['reconcile']"

    (block,) = [
        b for b in re.findall(r"```bash\n(.*?)```", PAGE.read_text(), re.S) if "keel schedules" in b
    ]
    for line in block.splitlines():
        command = shlex.split(line.split("#", 1)[0])
        assert command[0] == "keel"
        ran = _keel(settings, *command[1:])
        assert ran.returncode == 0, (line, ran.stderr)
    shown = json.loads(_keel(settings, "schedules", "show", "heartbeat", "--json").stdout)
    assert (shown["state"], shown["timing"], shown["overlap"]) == (
        "active",
        "every 2s",
        "allow_all",
    )
    names = json.loads(_keel(settings, "schedules", "list", "--deleted", "--json").stdout)
    assert {(s["name"], s["state"]) for s in names} == {
        ("heartbeat", "active"),
        ("nightly", "deleted"),
        ("reconcile", "deleted"),
    }
    assert _keel(settings, "schedules", "delete", "heartbeat").returncode == 0
    refused = _keel(settings, "schedules", "pause", "nightly")
    assert (refused.returncode, refused.stderr.strip()) == (
        1,
        "error: schedule 'nightly' is deleted; pause refused",
    )
