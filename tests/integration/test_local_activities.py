"""Local activities on the real broker: a mixed local/remote workflow, and a local step
past its timeout failed by the durable timer."""

from __future__ import annotations

import json

import pytest

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import ActivityTimedOut, WorkflowCompleted, WorkflowFailed
from orchestrator.payload_schemas.codec import Codec
from tests.integration.local_app import APP
from tests.integration.local_app import app as local_app
from tests.support import assert_sound_history, histories, read_topic, wait_until


@pytest.fixture
def local_client(settings):
    c = KeelClient(settings, local_app)
    yield c
    c.close()


def _assigned(proc) -> bool:
    return "assigned partitions" in proc.log_path.read_text()


def test_a_mixed_workflow_runs_local_steps_in_the_orchestrator_and_the_rest_on_workers(
    settings, services, local_client
):
    orch = services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    wait_until(lambda: _assigned(orch), 60, "the orchestrator's assignment")
    n = 20
    local_client.start_many("mixed_local_remote", [(f"mixed-{i}", {"n": i}) for i in range(n)])
    wait_until(
        lambda: local_client.projection.counts()["completed"] == n, 120, f"{n} completed runs"
    )
    by_wf = histories(settings, expect_events=9 * n)
    assert sorted(by_wf) == sorted(f"mixed-{i}" for i in range(n))
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)
        i = int(wf.split("-")[1])
        assert isinstance(events[-1].payload, WorkflowCompleted)
        assert json.loads(events[-1].payload.output_json) == {"n": ((i + 1) * 2) ** 2}
    codec = Codec()
    tasks = read_topic(
        settings.kafka_servers, settings.topic("activity-tasks"), settings.partitions, n
    )
    types = [codec.decode(r.value()).payload.activity_type for r in tasks]
    assert types == ["double"] * n, "only the remote step went to the workers"


def test_a_local_step_past_its_start_to_close_is_failed_by_the_timer(
    settings, services, local_client
):
    orch = services.start("orchestrator", "--app", APP)
    wait_until(lambda: _assigned(orch), 60, "the orchestrator's assignment")
    local_client.start_many("slow_local", [("slow-1", {"seconds": 30})])
    wait_until(lambda: local_client.projection.counts()["failed"] == 1, 60, "the run to fail")
    events = histories(settings)["slow-1"]
    assert_sound_history("slow-1", events)
    timed_out = [e.payload for e in events if isinstance(e.payload, ActivityTimedOut)]
    assert [(t.activity_id.split("/")[-1], t.timeout) for t in timed_out] == [
        ("sleep", "start_to_close")
    ]
    assert isinstance(events[-1].payload, WorkflowFailed)
    assert "StartToCloseTimeout" in events[-1].payload.reason
    assert [e.type for e in events].count("ActivityCompleted") == 0
    assert "overran its 300 ms bound" in orch.log_path.read_text()
