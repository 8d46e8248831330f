"""SIGKILL the orchestrator: nothing is lost, repeated or duplicated; timers still fire once."""

from __future__ import annotations

import random
import time

from orchestrator.domain.model.messages import TimerFired, TimerScheduled, WorkflowCompleted
from tests.support import assert_sound_history, histories, wait_until


def _assigned(proc) -> list[str]:
    return [ln for ln in proc.log_path.read_text().splitlines() if "assigned partitions" in ln]


def test_five_sigkills_with_500_workflows_in_flight(settings, services, client):
    rng = random.Random(7)
    # A stable instance id: each restart takes over at once and fences its predecessor.
    orch = services.start("orchestrator", KEEL_INSTANCE_ID="crashy")
    services.start("worker")
    wait_until(lambda: _assigned(orch), 60, "the first assignment")
    n = 500
    client.start_many("parallel_checks", [(f"crash-{i}", {"n": i}) for i in range(n)])
    # The first kill waits on an event, not a sleep: the first run's completion. A fixed
    # delay let all 500 runs finish first once the runtime got fast enough.
    wait_until(lambda: client.projection.counts()["completed"] > 0, 60, "the first run", 0.01)
    kills = 0
    in_flight_at_kill = []
    while kills < 5:
        if kills:
            time.sleep(rng.uniform(0.2, 1.5))
        in_flight_at_kill.append(n - client.projection.counts()["completed"])
        services.kill(orch)
        kills += 1
        orch = services.start("orchestrator", KEEL_INSTANCE_ID="crashy")
        wait_until(lambda p=orch: _assigned(p), 60, "re-assignment after restart")
    assert in_flight_at_kill[0] > 0, "the first kill must hit workflows in flight"
    wait_until(
        lambda: client.projection.counts()["completed"] == n, 300, f"{n} completed workflows"
    )
    by_wf = histories(settings, expect_events=11 * n)
    assert sorted(by_wf) == sorted(f"crash-{i}" for i in range(n))
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)
        assert isinstance(events[-1].payload, WorkflowCompleted)
        assert len(events) == 11, f"{wf}: {[e.type for e in events]}"


def test_scale_out_survivor_takes_the_partitions_of_a_killed_peer(settings, services, client):
    first = services.start("orchestrator")
    second = services.start("orchestrator")
    services.start("worker")
    wait_until(lambda: _assigned(first) and _assigned(second), 90, "both to own partitions")
    n = 300
    client.start_many("parallel_checks", [(f"scale-{i}", {"n": i}) for i in range(n)])
    wait_until(lambda: client.projection.counts()["completed"] > 0, 60, "the first run", 0.01)
    services.kill(second)
    before = len(_assigned(first))
    wait_until(lambda: len(_assigned(first)) > before, 90, "the survivor's new assignment")
    assert "[0, 1, 2, 3]" in _assigned(first)[-1]
    wait_until(
        lambda: client.projection.counts()["completed"] == n, 240, f"{n} completed workflows"
    )
    for wf, events in histories(settings, expect_events=11 * n).items():
        assert_sound_history(wf, events)


def test_a_timer_scheduled_before_a_sigkill_fires_once_after_restart(settings, services, client):
    orch = services.start("orchestrator", KEEL_INSTANCE_ID="timers")
    wait_until(lambda: _assigned(orch), 60, "assignment")
    wf = client.start("timer_demo", {"seconds": 3}, "sleepy").workflow_id
    wait_until(lambda: client.projection.status(wf) == "waiting", 30, "the timer wait")
    services.kill(orch)
    restarted = services.start("orchestrator", KEEL_INSTANCE_ID="timers")
    wait_until(lambda: _assigned(restarted), 60, "re-assignment")
    done = client.wait(wf, 60)
    assert done.status == "completed"
    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    scheduled = [e for e in events if isinstance(e.payload, TimerScheduled)]
    fired = [e for e in events if isinstance(e.payload, TimerFired)]
    assert len(scheduled) == 1 and len(fired) == 1
    assert fired[0].payload.timer_id == scheduled[0].payload.timer_id
    assert fired[0].recorded_at >= scheduled[0].payload.fire_at


def test_recovery_from_snapshot_checkpoints_after_a_sigkill(settings, services, client):
    from orchestrator.engine.orchestrator import CHECKPOINT_KEY
    from tests.support import decode_all, read_topic

    args = ("--checkpoint-interval", "0.5")
    orch = services.start("orchestrator", *args, KEEL_INSTANCE_ID="snappy")
    services.start("worker")
    wait_until(lambda: _assigned(orch), 60, "assignment")
    n = 50
    client.start_many("parallel_checks", [(f"snap-{i}", {"n": i}) for i in range(n)])
    review = client.start("document_review", {"document": "a"}, "snap-review").workflow_id
    wait_until(lambda: client.projection.counts()["completed"] == n, 120, "completions")
    wait_until(lambda: client.projection.status(review) == "waiting", 60, "the review wait")

    def checkpointed() -> list:
        records = read_topic(
            settings.kafka_servers, settings.topic("snapshots"), settings.partitions
        )
        return [e for e in decode_all(records) if e.workflow_id == review]

    wait_until(checkpointed, 30, "a snapshot of the waiting review")
    services.kill(orch)
    restarted = services.start("orchestrator", *args, KEEL_INSTANCE_ID="snappy")
    wait_until(lambda: _assigned(restarted), 60, "re-assignment")
    for n_signals, doc in enumerate(("b", "c"), start=1):
        wait_until(lambda: client.projection.status(review) == "waiting", 60, "waiting")
        client.signal(review, "documents_added", {"document": doc})
        wait_until(
            lambda k=n_signals: (
                k == sum(h["type"] == "SignalReceived" for h in client.projection.history(review))
            ),
            60,
            "the signal",
        )
    assert client.wait(review, 60).output == {"decision": "approved", "documents": 3}
    snapshots = decode_all(
        read_topic(settings.kafka_servers, settings.topic("snapshots"), settings.partitions)
    )
    assert any(e.workflow_id == CHECKPOINT_KEY for e in snapshots)
    for wf, events in histories(settings).items():
        assert_sound_history(wf, events)
