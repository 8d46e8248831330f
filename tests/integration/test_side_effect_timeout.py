"""A side effect that timed out after it started is never retried blindly (issue 47, item 4).

Real orchestrator and worker processes and the fake ledger holding each POST's answer
for 5 s: the step's start-to-close (1 s, no status query) fires while the posting is in
flight, so the run needs attention with one POST, and the operator settles it.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import (
    ActivityFailed,
    ActivityHeartbeat,
    ActivityScheduled,
    ActivityTimedOut,
    WorkflowCompleted,
    WorkflowNeedsAttention,
)
from orchestrator.runtime.health import status_path
from tests.integration.slow_ledger_app import APP, app
from tests.integration.test_durable_core import keel
from tests.support import Services, histories, wait_until


def _assigned(status: Path) -> bool:
    try:
        return bool(json.loads(status.read_text()).get("assigned_partitions"))
    except (OSError, ValueError):
        return False


INVOICE = {"account": "ACME", "amount": 10.0}


def _settled(settings, wf: str) -> bool:
    """The run completed, or needs attention: either way its worker has reported."""
    ends = (WorkflowCompleted, WorkflowNeedsAttention)
    return any(isinstance(e.payload, ends) for e in histories(settings).get(wf, []))


def test_a_timed_out_side_effect_needs_attention_with_one_post(
    settings, tmp_path, ledger_url, ledger
):
    svc = Services(settings, tmp_path, KEEL_LEDGER_URL=ledger_url)
    client = KeelClient(settings, app)
    try:
        svc.start("orchestrator", "--app", APP)
        home = tmp_path / "home"
        svc.start(
            "worker",
            "--app",
            APP,
            KEEL_HOME=str(home),
            KEEL_INSTANCE_ID="w",
            KEEL_STATUS_INTERVAL_S="0.3",
        )
        # a task no worker took times out "not started" (transient): wait for the worker
        wait_until(lambda: _assigned(status_path(home, "worker", "w")), 60, "the assignment")
        # One posting first, answered at once: a worker's first report after it starts can
        # take longer than this step's 1 s start-to-close on a busy machine (its producer
        # meets the partition's leader), and a start report that late reads "not started".
        warm = client.start("slow_ledger_posting", {**INVOICE, "invoice_id": "INV-0"}, "warm-1")
        wait_until(lambda: _settled(settings, warm.workflow_id), 60, "the first posting")
        ledger.reset()
        ledger.set_faults(delay_s=5, delay_count=10)  # committed at once, answered 5 s later
        invoice = {**INVOICE, "invoice_id": "INV-1"}
        wf = client.start("slow_ledger_posting", invoice, "slow-1").workflow_id

        def attention() -> list:
            events = histories(settings).get(wf, [])
            return [e for e in events if isinstance(e.payload, WorkflowNeedsAttention)]

        wait_until(attention, 60, "needs_attention")
        wait_until(lambda: ledger.ledger()["effects"], 30, "the posting to commit")
        events = [e.payload for e in histories(settings)[wf]]
        posts = [p for p in events if isinstance(p, ActivityScheduled)]
        assert [p.attempt for p in posts] == [1], "the write was dispatched once"
        key = posts[0].idempotency_key
        assert [p for p in events if isinstance(p, ActivityHeartbeat)] == [
            ActivityHeartbeat("run#1/post", 1, "null", side_effect=True)
        ]
        assert [p.timeout for p in events if isinstance(p, ActivityTimedOut)] == ["start_to_close"]
        assert not [p for p in events if isinstance(p, ActivityFailed)]
        assert ledger.ledger()["calls"] == {key: 1}, "one POST"
        # the operator checks the ledger by the key and settles the run with its posting
        posting = ledger.posting(key)
        found = json.dumps({"posting_id": posting["posting_id"], "key": key})
        resolved = keel(settings, "workflow", "resolve", wf, "run#1/post", "--found", found)
        assert resolved.returncode == 0, resolved.stderr
        done = client.wait(wf, 60)
        assert done.status == "completed"
        assert ledger.ledger()["calls"] == {key: 1}, "the write was never repeated"
    finally:
        client.close()
        svc.stop_all()
