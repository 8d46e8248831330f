"""``keel demo --basic`` (the three small workflows) end to end at a tiny size, against the real broker and Redis.

The demo's own processes (ledger, orchestrator, worker) run and are stopped by the demo;
this test reads its final tables, then checks the histories in ``keel.events`` itself.
"""

from __future__ import annotations

import re

from orchestrator.domain.model.messages import SignalReceived, WorkflowCompleted
from tests.support import assert_sound_history, histories, run_keel

SIZE = 12  # 4 of each: reviews 0 and 3 approve after 2 signals, 1 rejects after 2, 2 at once
KINDS = ("checks", "review", "invoice")


def table_rows(text: str) -> list[list[str]]:
    """The body rows of every rich table in ``text``, as lists of cell texts."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.strip().startswith("│")
    ]


def test_the_demo_runs_a_checked_batch_through_a_crash(servers, tmp_path):
    done = run_keel(servers, tmp_path, "demo", "--basic", "--size", str(SIZE), timeout_s=300)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    rows = table_rows(out)
    outcomes = {(r[0], r[1]): int(r[2]) for r in rows if len(r) == 3}
    assert outcomes == {
        ("document_review", "approved"): 2,
        ("document_review", "rejected"): 2,
        ("invoice_posting", "completed"): 4,
        ("parallel_checks", "completed"): 4,
    }
    checks = {r[0]: r[1] for r in rows if len(r) == 2}
    assert checks["runs"] == checks["runs ended"] == str(SIZE)
    assert checks["orchestrator SIGKILLs"] == "1"
    assert checks["signals sent"] == "6"
    assert checks["ledger postings"] == "4"
    dropped = int(checks["responses the ledger dropped"])
    assert dropped >= 1, "the ledger dropped at least one response after committing"
    assert int(checks["unknown outcomes"]) >= dropped
    assert checks["reconciled by status query"] == checks["unknown outcomes"]
    for name in (
        "duplicate effects",
        "runs not terminal",
        "unsound histories",
        "invariant violations",
    ):
        assert checks[name] == "0", name
    assert "every invariant held" in out
    assert re.search(r"keel workflow show invoice-\d{4}", out)

    # The event store agrees, read independently of the demo.
    prefix = re.search(r"topic prefix (demo-[\w-]+)", out).group(1)
    from orchestrator.config.settings import Settings

    demo_settings = Settings(
        bootstrap_servers=servers.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=prefix,
        partitions=4,
    )
    by_wf = histories(demo_settings)
    assert sorted(by_wf) == sorted(["warm-up", *(f"{k}-{j:04d}" for k in KINDS for j in range(4))])
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)
        assert isinstance(events[-1].payload, WorkflowCompleted), wf
    signals = sum(isinstance(e.payload, SignalReceived) for ev in by_wf.values() for e in ev)
    assert signals == 6
