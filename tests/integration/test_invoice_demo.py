"""``keel demo`` (the main job: the invoice pipeline through a crash) at its smallest size,
against the real broker and Redis. The demo checks its own invariants; this test reads
its tables and then the demo's histories in ``keel.events`` itself."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from orchestrator.config.settings import Settings
from tests.integration.test_demo import table_rows
from tests.support import assert_sound_history, histories, run_keel

MANIFEST = Path(__file__).resolve().parents[2] / "ops" / "demo_data" / "invoices" / "manifest.json"


def test_the_main_job_runs_the_invoice_pipeline_through_a_crash(servers, tmp_path):
    done = run_keel(servers, tmp_path, "demo")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    expected = Counter(m["expected"] for m in json.loads(MANIFEST.read_text()))
    rows = table_rows(out)
    checks = {r[0]: r[1] for r in rows if len(r) == 2}
    outcomes = {k: int(v) for k, v in checks.items() if k in expected}
    assert outcomes == dict(expected)
    assert checks["invoices (runs)"] == str(sum(expected.values()))
    assert checks["duplicate effects (ledger and payables)"] == "0"
    assert checks["reconciliation mismatches"] == "0"
    assert checks["invariant violations"] == "0"
    assert checks["SIGKILLs (orchestrator, worker)"] == "2"
    assert checks["approvals refused as stale"] == "1"
    assert checks["approvals escalated / expired"] == "1 / 1"
    assert checks["repeated deliveries answered 200, nothing written"] == "1"
    assert checks["re-uploads joined to their run"] == "1"
    # the ledger drops two answers; a worker SIGKILL may add a timed-out posting
    assert (
        2
        <= int(checks["settled by status query"])
        <= int(checks["unknown outcomes (lost answers, timeouts)"])
    )
    assert checks["compensations (posting reversed)"] == "1"

    prefix = re.search(r"topic prefix (invoices-[\w-]+)", out)
    assert prefix is not None, out
    settings = Settings(
        bootstrap_servers=servers.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=prefix.group(1),
        partitions=4,
    )
    by_wf = histories(settings)
    assert len(by_wf) == sum(expected.values())
    ends = Counter(events[-1].type for events in by_wf.values())
    assert ends == {"WorkflowCompleted": len(by_wf) - 1, "WorkflowCompensated": 1}
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)
    _explore_as_printed(servers, tmp_path, out, len(by_wf))


def _explore_as_printed(servers, tmp_path: Path, out: str, runs: int) -> None:
    """What the demo tells a new user to type after it works as printed, from inside a
    project of their own (where the bundled app is never a default): its env file names
    the app, so no hint needs ``--app``."""
    hints = out.split("Explore (", 1)[1].splitlines()
    source = next(line for line in hints if "explore.env" in line)
    found = re.search(r"\. (\S+/explore\.env);", source)
    assert found is not None, source
    env = dict(line.split("=", 1) for line in Path(found.group(1)).read_text().splitlines())
    assert env["KEEL_APP"] == "orchestrator.examples.invoice_pipeline:app"
    commands = [line.split("#")[0].split() for line in hints if line.strip().startswith("keel ")]
    assert commands and not [c for c in commands if "--app" in c]
    shop = tmp_path / "shop"
    shop.mkdir()
    (shop / "pyproject.toml").write_text('[project]\nname = "shop"\nversion = "0"\n')
    listed = next(c for c in commands if c[:3] == ["keel", "workflow", "list"])
    shown = [c for c in commands if c[:3] == ["keel", "workflow", "show"]]
    answer = run_keel(servers, tmp_path, *listed[1:], env=env, cwd=shop)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert answer.stdout.rstrip().endswith(f"{runs} of {runs} run(s)"), answer.stdout
    for command in shown:
        one = run_keel(servers, tmp_path, *command[1:], env=env, cwd=shop)
        assert one.returncode == 0 and command[3] in one.stdout, one.stdout + one.stderr
