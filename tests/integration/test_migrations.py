"""Recorded migrations on the real broker and Redis (docs/versioning.md, "Migrate").

Two v1 runs of ``ticket`` wait: one for approval (mapped to v2's ``approval``), one on
hold (not mapped). ``keel workflow migrate --dry-run`` shows the plan and the replay diff
and produces nothing on ``keel.commands``; the migration of the first is recorded and the
run finishes on v2's path after its signal; the second is refused by the orchestrator
with the reason, exit status 1. Then the whole topic replays identically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from confluent_kafka import Consumer, TopicPartition

from orchestrator.client.client import KeelClient
from tests.integration import migration_app
from tests.support import histories, wait_until

APP = "tests.integration.migration_app:app"


def _keel(services, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**services.env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args, "--app", APP],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _commands_written(settings) -> int:
    """Records ever produced on keel.commands (the sum of its high watermarks)."""
    topic = settings.topic("commands")
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_servers, "group.id": f"wm-{uuid.uuid4().hex}"}
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts
        )
    finally:
        consumer.close()


def test_a_waiting_run_migrates_to_v2_and_an_unmapped_one_is_refused(settings, services) -> None:
    services.start("worker", "--app", APP)
    services.start("orchestrator", "--app", APP)
    client = KeelClient(settings, migration_app.app)
    client.start("ticket", {"ticket": 101}, "tk-wait", version=1)
    client.start("ticket", {"ticket": 5, "hold": True}, "tk-hold", version=1)
    wait_until(
        lambda: (
            [client.show(w).state for w in ("tk-wait", "tk-hold")]
            == ["awaiting_approval", "on_hold"]
        ),
        90,
        "both v1 runs waiting",
    )

    # the dry run writes nothing, and says what would happen
    before = _commands_written(settings)
    dry = _keel(services, "workflow", "migrate", "tk-wait", "--to-version", "2", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert (
        "would migrate: tk-wait (ticket v1, waiting in 'awaiting_approval') -> v2 state "
        f"'approval' (digest {migration_app.V2.digest[:12]})"
    ) in dry.stdout
    assert '"type": "WorkflowMigrated"' in dry.stdout
    assert "replay on v2: differs at seq 3 deciding StartWorkflow" in dry.stdout
    assert "dry run: nothing was written" in dry.stdout
    batch = _keel(
        services,
        "workflow",
        "migrate",
        "--name",
        "ticket",
        "--from-version",
        "1",
        "--to-version",
        "2",
        "--dry-run",
        "--json",
    )
    assert batch.returncode == 1, batch.stdout + batch.stderr  # one run would be refused
    plans = {p["workflow_id"]: p for p in json.loads(batch.stdout)["plans"]}
    assert plans["tk-wait"]["outcome"] == "would_migrate"
    assert plans["tk-wait"]["to_state"] == "approval"
    assert plans["tk-hold"]["outcome"] == "refused"
    assert _commands_written(settings) == before
    assert client.show("tk-wait").version == 1

    # the migration is recorded and the run goes on along v2's path
    done = _keel(
        services,
        "workflow",
        "migrate",
        "tk-wait",
        "--to-version",
        "2",
        "--actor",
        "ana",
        "--reason",
        "approval gets a timeout",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == (
        "migrated: tk-wait v1 -> v2, state 'awaiting_approval' -> 'approval' (v1->v2)"
    )
    assert _commands_written(settings) == before + 1
    client.signal("tk-wait", "approve", {})
    finished = client.wait("tk-wait", 90)
    assert finished.status == "completed"
    assert finished.output == {"path": "v2", "ticket": 101, "priority": "urgent"}

    # a finished run records no refusal: its end is the answer, at once, not a timeout
    late = _keel(services, "workflow", "migrate", "tk-wait", "--to-version", "2", "--timeout", "90")
    assert late.returncode == 1, late.stdout + late.stderr
    assert late.stdout.strip() == (
        "refused: tk-wait: workflow 'tk-wait' is completed; migration to version 2 refused"
    )

    # the unmapped run is refused by the orchestrator, with its reason
    refused = _keel(services, "workflow", "migrate", "tk-hold", "--to-version", "2")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout.strip() == (
        "refused: tk-hold: workflow 'tk-hold' is in state 'on_hold', which migration v1->v2 "
        "does not map (it maps 'awaiting_approval'); migration to version 2 refused"
    )
    assert client.show("tk-hold").version == 1

    by_wf = histories(settings)
    types = [e.type for e in by_wf["tk-wait"]]
    at = types.index("WorkflowMigrated")
    assert types[at:] == [
        "WorkflowMigrated",
        "StateEntered",
        "TimerScheduled",
        "SignalReceived",
        "StateEntered",
        "ActivityScheduled",
        "ActivityCompleted",
        "WorkflowCompleted",
    ]
    moved = by_wf["tk-wait"][at].payload
    assert (moved.from_version, moved.to_version, moved.to_digest) == (
        1,
        2,
        migration_app.V2.digest,
    )
    assert (moved.from_state, moved.to_state, moved.actor, moved.reason) == (
        "awaiting_approval",
        "approval",
        "ana",
        "approval gets a timeout",
    )
    assert "WorkflowMigrated" not in [e.type for e in by_wf["tk-hold"]]
    client.close()

    check = _keel(services, "replay-check", "--from-topic", "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert report["runs"] == 2 and report["diverged"] == 0
    [migrated] = [r for r in report["reports"] if r["workflow_id"] == "tk-wait"]
    assert [m["to_version"] for m in migrated["migrations"]] == [2]
    assert migrated["folded_only"] == 0
