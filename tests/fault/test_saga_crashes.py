"""SIGKILL the orchestrator and the saga manager while compensations run: every
compensation happens exactly once and none is skipped (the booking service's books),
and the saga emits each of its commands once."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import ActivityCompleted, ActivityScheduled, StartWorkflow
from tests.fault.travel_sagas_app import app as travel_app
from tests.fault.travel_sagas_app import followup_id
from tests.sagas_support import booking, booking_url, trip  # noqa: F401
from tests.support import assert_sound_history, decode_all, histories, read_topic, wait_until

APP = "tests.fault.travel_sagas_app:app"
N = 200


def _assigned(proc) -> bool:
    return "assigned partitions" in proc.log_path.read_text()


def test_sigkills_mid_compensation_undo_every_effect_exactly_once(
    settings,
    services,
    booking,  # noqa: F811
    booking_url,  # noqa: F811
):
    rng = random.Random(12)
    env = {"KEEL_BOOKING_URL": booking_url}
    orch = services.start("orchestrator", "--app", APP, KEEL_INSTANCE_ID="saga-orch", **env)
    sagas = services.start("sagas", "--app", APP, **env)
    services.start("worker", "--app", APP, **env)
    wait_until(lambda: _assigned(orch), 60, "the first assignment")
    client = KeelClient(settings, travel_app)
    declined = {i for i in range(N) if i % 4 != 0}  # 150 compensate, 50 complete
    for i in range(N):  # start_many takes one workflow name; inputs differ per run
        client.start(
            "travel_booking", trip(i, declined=i in declined), f"trip-{i}", confirm_timeout_s=None
        )
    client.close()
    wait_until(lambda: client.projection.counts()["compensating"] > 0, 120, "a run compensating")
    compensating_at_kill = []
    for kill in range(4):
        compensating_at_kill.append(client.projection.counts()["compensating"])
        services.kill(orch)
        orch = services.start("orchestrator", "--app", APP, KEEL_INSTANCE_ID="saga-orch", **env)
        if kill % 2 == 0:
            services.kill(sagas)
            sagas = services.start("sagas", "--app", APP, **env)
        wait_until(lambda p=orch: _assigned(p), 60, "re-assignment after restart")
        time.sleep(rng.uniform(0.5, 2.0))
    assert compensating_at_kill[0] > 0, "the first kill must hit compensations in flight"

    def finished() -> bool:
        c = client.projection.counts()
        return c["compensated"] == len(declined) and c["completed"] >= N - len(declined)

    wait_until(finished, 600, f"{N} trips finished")
    by_wf = histories(settings)
    live, cancelled_trips = [], {}
    for i in range(N):
        wf = f"trip-{i}"
        events = by_wf[wf]
        assert_sound_history(wf, events)
        booked = {
            e.payload.activity_id: json.loads(e.payload.result_json)
            for e in events
            if isinstance(e.payload, ActivityCompleted)
            and e.payload.activity_id.endswith(("hotel", "flight"))
        }
        rids = [booked[f"run#1/{s}"]["reservation_id"] for s in ("flight", "hotel")]
        undo = [
            e.payload
            for e in events
            if isinstance(e.payload, ActivityScheduled)
            and e.payload.activity_type == "cancel_reservation"
            and e.payload.attempt == 1
        ]
        if i in declined:
            assert events[-1].type == "WorkflowCompensated", wf
            assert [u.activity_id for u in undo] == ["run#1/flight/undo", "run#1/hotel/undo"], wf
            cancelled_trips[wf] = (rids, [u.idempotency_key for u in undo])
        else:
            assert events[-1].type == "WorkflowCompleted" and undo == [], wf
            live += rids
    books = booking.books()
    # none skipped, none twice: the service's own counts
    assert sorted(books["live"]) == sorted(live)
    expected_cancelled = {rid: 1 for rids, _ in cancelled_trips.values() for rid in rids}
    assert books["cancelled"] == expected_cancelled
    expected_keys = {k: 1 for _, keys in cancelled_trips.values() for k in keys}
    assert books["cancellations"] == expected_keys
    assert len(expected_keys) == 2 * len(declined)

    # the saga: exactly one follow-up start per compensated trip, each run once. The saga
    # manager reacts to the compensations asynchronously: wait for its last start first,
    # and check again once every follow-up ran (a late duplicate would show then).
    def saga_starts() -> Counter[str]:
        records = read_topic(
            settings.kafka_servers, settings.topic("commands"), settings.partitions
        )
        return Counter(
            e.workflow_id
            for e in decode_all(records)
            if isinstance(e.payload, StartWorkflow) and e.message_id.startswith("saga/")
        )

    expected = Counter(followup_id(wf) for wf in cancelled_trips)
    wait_until(lambda: saga_starts().total() >= expected.total(), 120, "the saga's starts")
    assert saga_starts() == expected
    wait_until(
        lambda: all(
            (client.projection.status(followup_id(wf)) == "completed") for wf in cancelled_trips
        ),
        300,
        "every follow-up completed",
    )
    assert saga_starts() == expected
