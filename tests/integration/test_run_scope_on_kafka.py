"""Issue 44, items 1-2 on a real broker: nothing of one run is applied to the next.

``scope_parent`` (tests/integration/run_scope_app.py) starts a child under a derived id,
waits for ``go``, is signalled and continues as new; run 2 starts its own child and waits
again, unsignalled, until its own timeout ends it. Real orchestrator and worker processes,
real Kafka and Redis. While run 2 waits, an attacker with produce rights on the commands
topic sends a ``FireTimer`` for run 2's timeout and run 1's child report again. Each of
these went wrong before runs scoped their ids: run 2 derived run 1's child id and joined
the finished child (the parent hung), run 1's timer entry fired run 2's timeout early, and
a forged ``FireTimer`` fired any timer at once.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from confluent_kafka import Producer

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CommandRefused,
    CompleteActivity,
    Envelope,
    FireTimer,
    TimerFired,
    TimerScheduled,
    WorkflowContinuedAsNew,
)
from orchestrator.io.kafka.clients import producer_config
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import now_ms
from tests.integration import run_scope_app
from tests.integration.run_scope_app import APP, PAUSE_S, TIMEOUT_S
from tests.support import assert_sound_history, histories, wait_until


def forge(settings, wf: str, run_id: str, payload: Any) -> str:
    """One record straight onto the commands topic, as anyone with produce rights can."""
    mid = f"forged-{uuid.uuid4().hex}"
    env: Envelope[Any] = Envelope(
        mid, wf, run_id, 0, type(payload).__name__, now_ms(), payload, None, wf
    )
    producer = Producer(producer_config(settings))
    producer.produce(settings.topic("commands"), Codec().encode(env), wf.encode())
    assert producer.flush(30) == 0
    return mid


def events_of(settings, wf: str, kind: type) -> list[Envelope[Any]]:
    return [e for e in histories(settings).get(wf, []) if isinstance(e.payload, kind)]


def test_a_continued_run_has_its_own_child_and_timer_and_forged_commands_are_refused(
    settings, services
) -> None:
    services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    client = KeelClient(settings, run_scope_app.app)
    wf = f"scope-{uuid.uuid4().hex[:8]}"
    try:
        client.start("scope_parent", {"round": 1}, wf)
        wait_until(lambda: events_of(settings, wf, TimerScheduled), 60, "run 1's wait to open")
        client.signal(wf, "go", {})
        # run 2's timeout is armed once round 2's child has paused PAUSE_S
        [run2_timer] = wait_until(
            lambda: events_of(settings, wf, TimerScheduled)[1:], 60, "run 2's wait to open"
        )
        [continued] = events_of(settings, wf, WorkflowContinuedAsNew)
        run1, run2 = continued.run_id, continued.payload.new_run_id
        fire_at = run2_timer.payload.fire_at
        assert now_ms() < fire_at, "run 2's timeout must still be pending for the forgery"
        forged_fire = forge(settings, wf, run2, FireTimer(run2_timer.payload.timer_id))
        kids = events_of(settings, wf, ActivityScheduled)
        late = CompleteActivity(kids[0].payload.activity_id, 1, '{"round": 1}')
        forged_report = forge(settings, wf, run1, late)

        final = client.wait(wf, 60)
        assert (final.status, final.state, final.output) == ("completed", "timed_out", {"round": 2})
    finally:
        client.close()

    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    timers = [e for e in events if isinstance(e.payload, TimerScheduled)]
    assert timers[1].payload.timer_id != timers[0].payload.timer_id
    assert timers[1].payload.timer_id.endswith(f"@{continued.seq}/timeout")
    # run 2's timeout fired by the engine, when due, never at run 1's deadline or on demand
    [fired] = [e for e in events if isinstance(e.payload, TimerFired) and e.run_id == run2]
    assert fired.payload.timer_id == timers[1].payload.timer_id
    assert fired.recorded_at >= fire_at
    # run 1's deadline came first: an entry of its timer left armed would have fired run 2's
    assert fire_at - timers[0].payload.fire_at >= PAUSE_S * 1000
    assert fire_at - run2_timer.recorded_at == TIMEOUT_S * 1000
    refusals = {
        e.causation_id: e.payload.reason for e in events if isinstance(e.payload, CommandRefused)
    }
    assert refusals[forged_fire] == (
        "FireTimer is issued only by the engine itself; one read from the commands topic is "
        "refused, never applied"
    )
    assert refusals[forged_report].startswith(
        f"completion of activity '{kids[0].payload.activity_id}' attempt 1 is of run '{run1}', "
        f"not of the current run '{run2}' of workflow '{wf}'"
    )
    # two children, one per run, each under an id of its own run
    child_ids = [e.payload.idempotency_key for e in kids]
    assert child_ids == [f"{wf}:run.1.kid", f"{wf}:run.1@{continued.seq}.kid"]
    all_histories = histories(settings)
    for child_id, round_ in zip(child_ids, (1, 2), strict=True):
        assert_sound_history(child_id, all_histories[child_id])
        assert json.loads(all_histories[child_id][-1].payload.output_json) == {"round": round_}
