"""A real worker process reports its Kafka state in its status file and stops on SIGTERM."""

from __future__ import annotations

import json
import signal

from orchestrator.domain.model.messages import CompleteActivity
from orchestrator.payload_schemas.codec import Codec
from tests.integration.worker_app import APP
from tests.support import Services, produce, reports, task_envelope, wait_until


def test_the_worker_status_file_shows_partitions_and_commits_and_sigterm_stops_it(
    settings, tmp_path
):
    home = tmp_path / "home"
    svc = Services(
        settings, tmp_path, KEEL_HOME=str(home), KEEL_INSTANCE_ID="w1", KEEL_STATUS_INTERVAL_S="0.2"
    )
    status_file = home / "status" / "worker-w1.json"
    try:
        worker = svc.start("worker", "--app", APP)
        every = list(range(settings.partitions))
        wait_until(
            lambda: (
                status_file.exists()
                and json.loads(status_file.read_text())["assigned_partitions"] == every
            ),
            60,
            "the worker's partitions in its status file",
        )
        task = task_envelope("health-1", "add_one", '{"n": 1}')
        produce(settings, "activity-tasks", [(b"health-1", Codec().encode(task))])
        [report] = wait_until(lambda: reports(settings, "health-1"), 60, "the report")
        assert report.payload == CompleteActivity("run#1/step", 1, '{"n":2}')
        status = wait_until(
            lambda: (
                (s := json.loads(status_file.read_text()))["last_commit_age_s"] is not None and s
            ),
            30,
            "the commit in the status file",
        )
        assert status["role"] == "worker" and status["state"] == "running"
        assert status["consumer_resets"] == 0 and status["stalled_calls"] == 0
        assert status["redis"]["down"] is False
        assert status["completed"] == 1

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        final = json.loads(status_file.read_text())
        assert final["state"] == "stopped"
        log = worker.log_path.read_text()
        assert "health: partitions=[0, 1, 2, 3] last_commit_age_s=" in log
    finally:
        svc.stop_all()
