"""Sync fan-out items run side by side on one real worker (Kafka, Redis, processes).

The items block at a barrier until all have started (``sync_fan_out_app``): the run
completes only when the worker ran them at once; one at a time, it fails.
"""

from __future__ import annotations

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import ActivityFailed, ActivityScheduled
from tests.integration import sync_fan_out_app
from tests.integration.sync_fan_out_app import APP, ITEMS
from tests.support import Services, assert_sound_history, histories


def test_n_sync_items_with_max_concurrency_n_run_at_once_on_one_worker(settings, tmp_path):
    svc = Services(settings, tmp_path)
    client = KeelClient(settings, sync_fan_out_app.app)
    try:
        svc.start("orchestrator", "--app", APP)
        svc.start("worker", "--app", APP)
        wf = client.start("sync_fan_out", {"items": list(range(ITEMS))}).workflow_id
        done = client.wait(wf, 90)
        assert done.status == "completed", done
        met = done.output["met"]
        assert [m["item"] for m in met] == list(range(ITEMS))
        assert len({m["thread"] for m in met}) == ITEMS  # one pool thread each
        events = histories(settings)[wf]
        assert_sound_history(wf, events)
        assert not [e for e in events if isinstance(e.payload, ActivityFailed)]
        scheduled = [e.payload for e in events if isinstance(e.payload, ActivityScheduled)]
        assert [s.attempt for s in scheduled] == [1] * ITEMS
    finally:
        svc.stop_all()
        client.close()
