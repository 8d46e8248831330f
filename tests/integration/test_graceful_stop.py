"""A SIGTERM'd orchestrator commits its final checkpoint before it exits.

The checkpoint is what the next owner of a partition rebuilds from. Before the fix, the stop
itself made the final checkpoint's commit give up (``Stopping``): the records were written in
a transaction nobody committed, the broker aborted it ten seconds after the process exited,
and a ``read_committed`` reader (the next owner) never saw them.
"""

from __future__ import annotations

import signal

from orchestrator.client.client import KeelClient
from orchestrator.engine.recovery import CHECKPOINT_KEY
from orchestrator.examples import app
from tests.support import Services, read_topic, wait_until

WF = "graceful-stop-1"


def test_a_sigterm_commits_the_final_checkpoint_a_committed_reader_sees(settings, tmp_path):
    svc = Services(settings, tmp_path)
    client = KeelClient(settings, app)
    try:
        # Checkpoints every hour: the only one this test can see is the final one.
        orch = svc.start("orchestrator", "--checkpoint-interval", "3600", "--no-projector")
        client.start("parallel_checks", {"n": 3}, workflow_id=WF, confirm_timeout_s=None)
        events = settings.topic("events")
        wait_until(
            lambda: read_topic(settings.kafka_servers, events, settings.partitions, 1, max_s=2),
            60,
            "the run's first events (no worker runs its activities: it stays open)",
        )

        orch.send_signal(signal.SIGTERM)
        assert orch.wait(timeout=60) == 0
        log = orch.log_path.read_text()
        assert "final checkpoint skipped" not in log

        snapshots = read_topic(
            settings.kafka_servers, settings.topic("snapshots"), settings.partitions, max_s=10
        )
        # The run's snapshot and its partition's marker (only changed partitions get one).
        found = sorted((r.key().decode(), r.partition()) for r in snapshots)
        [(_, partition)] = [f for f in found if f[0] == WF]
        assert found == sorted([(WF, partition), (CHECKPOINT_KEY, partition)]), found
    finally:
        svc.stop_all()
        client.close()
