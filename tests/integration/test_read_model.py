"""The Redis read model on real Redis and Kafka: its own keyspace, safe rebuilds, poison events.

The read model is the only keyspace a rebuild clears (``keel:<prefix>:rm:``): effect
records and dedupe markers survive it; ids cannot collide with other keys; a rebuild while
services run leaves every history whole; an event the projector cannot decode or fold is
skipped for its workflow and the projector goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from confluent_kafka import Producer

from orchestrator.examples import app as example_app
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.io.redis.read_model import Projection
from orchestrator.projector.projector import Projector
from tests.support import histories, wait_until


def keel(settings, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = settings.child_environment(**extra_env)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_a_rebuild_clears_the_read_model_only_and_keeps_effect_records(settings, client):
    ks = Keyspace(settings.topic_prefix)
    r = client.projection.r
    r.hset(ks.effect("post:inv-1:1"), mapping={"state": "committed", "result": '{"id": 7}'})
    r.set(ks.dedupe("ledger", "evt-1"), "1")
    r.set(ks.redriven("letter-1"), "1")
    legacy_effect = f"keel:{settings.topic_prefix}:effect:post:inv-2:1"  # the worker's old layout
    r.hset(legacy_effect, mapping={"state": "committed", "result": "{}"})
    r.hset(ks.workflow("stale"), mapping={"name": "x"})

    total, _ = Projector(settings, example_app).rebuild()

    assert total == 0
    assert r.hgetall(ks.effect("post:inv-1:1")) == {"state": "committed", "result": '{"id": 7}'}
    assert r.get(ks.dedupe("ledger", "evt-1")) == "1"
    assert r.get(ks.redriven("letter-1")) == "1"
    assert r.hgetall(legacy_effect) == {"state": "committed", "result": "{}"}
    assert not r.exists(ks.workflow("stale"))
    leftover = set(r.scan_iter(match=f"{ks.read_model}*"))
    assert leftover == {f"{ks.read_model}rebuild:epoch"}


def test_an_id_that_looks_like_another_key_is_its_own_workflow(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    first = client.start("parallel_checks", {"n": 1}, "col:history")
    second = client.start("parallel_checks", {"n": 2}, "col")
    assert (first.existed, second.existed) == (False, False)
    assert client.wait("col:history", 60).output == {"result": 2 + 2 + 1}
    assert client.wait("col", 60).output == {"result": 3 + 4 + 4}
    for wf, run in (("col:history", first.run_id), ("col", second.run_id)):
        view = client.show(wf)
        assert view.run_id == run
        assert [h["seq"] for h in view.history] == list(range(1, len(view.history) + 1))
        assert view.history[0]["type"] == "WorkflowStarted"
    rows = {r["workflow_id"]: r["status"] for r in client.projection.list()}
    assert rows == {"col:history": "completed", "col": "completed"}


def test_markup_in_ids_and_state_names_is_printed_as_text(settings):
    """A row written before ids were checked, with rich markup in its id and its state."""
    from orchestrator.domain.model.messages import Envelope, WorkflowStarted
    from orchestrator.domain.model.state import WorkflowState

    wf = "[/bold]"
    started = Envelope(
        message_id="m1",
        workflow_id=wf,
        run_id="run-1",
        seq=1,
        type="WorkflowStarted",
        recorded_at=1_700_000_000_000,
        payload=WorkflowStarted("parallel_checks", 1, "d", '{"n": "[red]x[/]"}'),
    )
    state = WorkflowState(
        workflow_id=wf,
        run_id="run-1",
        name="parallel_checks",
        version=1,
        digest="d",
        input_json="{}",
        seq=1,
        current_state="[/]",
        started_at=1_700_000_000_000,
        updated_at=1_700_000_000_000,
    )
    Projection.from_url(settings.redis, settings.topic_prefix).write({wf: (state, [started], None)})

    shown = keel(settings, "workflow", "show", wf)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "[/bold]  parallel_checks v1  status=running  state=[/]"
    assert "[red]x[/]" in shown.stdout
    listed = keel(settings, "workflow", "list")
    assert listed.returncode == 0, listed.stderr
    assert "[/bold]" in listed.stdout


def test_a_rebuild_under_traffic_leaves_every_history_whole(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    client.start_many("parallel_checks", [(f"pre-{i}", {"n": i}) for i in range(60)])
    wait_until(lambda: client.projection.counts()["completed"] >= 20, 120, "some completions")

    stop = threading.Event()
    started: list[str] = []

    def traffic() -> None:
        i = 0
        while not stop.is_set() and i < 200:
            batch = [(f"live-{i + k}", {"n": k}) for k in range(5)]
            client.start_many("parallel_checks", batch)
            started.extend(wf for wf, _ in batch)
            i += 5
            stop.wait(0.05)

    feeder = threading.Thread(target=traffic)
    feeder.start()
    try:
        rebuilt = keel(settings, "projections", "rebuild")
    finally:
        stop.set()
        feeder.join()
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.startswith("rebuilt the read model from ")

    n = 60 + len(started)
    wait_until(lambda: client.projection.counts()["completed"] == n, 240, f"{n} completions")
    by_wf = histories(settings, expect_events=11 * n)
    assert len(by_wf) == n
    for wf, events in by_wf.items():
        shown = client.projection.history(wf)
        assert [h["seq"] for h in shown] == [e.seq for e in events], wf
        assert [h["type"] for h in shown] == [e.type for e in events], wf


@pytest.mark.unsound_history  # poison events on purpose: a tombstone, garbage, an orphan
def test_poison_events_are_skipped_per_workflow_and_the_projector_goes_on(
    settings, services, client
):
    from orchestrator.domain.model.messages import Envelope, WorkflowCompleted
    from orchestrator.payload_schemas.codec import Codec

    services.start("orchestrator")
    services.start("worker")
    done = client.start("parallel_checks", {"n": 1}, "healthy-1")
    assert client.wait(done.workflow_id, 60).status == "completed"
    last_seq = client.show("healthy-1").history[-1]["seq"]

    codec = Codec()
    after_end = Envelope(  # the run already completed: this event cannot follow
        message_id="poison-2",
        workflow_id="healthy-1",
        run_id=done.run_id,
        seq=last_seq + 1,
        type="WorkflowCompleted",
        recorded_at=1,
        payload=WorkflowCompleted('{"forged": true}'),
    )
    orphan = Envelope(  # a history that does not start with WorkflowStarted
        message_id="poison-3",
        workflow_id="orphan",
        run_id="r",
        seq=1,
        type="WorkflowCompleted",
        recorded_at=1,
        payload=WorkflowCompleted("{}"),
    )
    producer = Producer({"bootstrap.servers": settings.kafka_servers})
    events = settings.topic("events")
    producer.produce(events, key=b"tombstone", value=None)
    producer.produce(events, key=b"garbage", value=b"\x00not avro")
    producer.produce(events, key=b"healthy-1", value=codec.encode(after_end))
    producer.produce(events, key=b"orphan", value=codec.encode(orphan))
    producer.flush(10)

    after = client.start("parallel_checks", {"n": 2}, "after-poison")
    assert client.wait(after.workflow_id, 60).output == {"result": 3 + 4 + 4}
    # the poison records sit on other partitions than after-poison's: the projector may
    # reach them after that run ended, so wait (bounded) for the skip to be recorded
    view = wait_until(
        lambda: (v := client.show("healthy-1")).projection_error and v,
        30,
        "the skipped event to be recorded on healthy-1",
    )
    assert view.status == "completed"
    assert view.history[-1]["seq"] == last_seq
    assert view.projection_error.startswith(
        f"event seq {last_seq + 1} (WorkflowCompleted) skipped: "
    )
    assert client.projection.get("orphan") is None

    def skipped_all() -> dict | None:
        status = json.loads(keel(settings, "projections", "status", "--json").stdout)
        [projector] = status["projectors"]
        return projector if projector["skipped"] >= 4 else None

    projector = wait_until(skipped_all, 30, "the projector's health to count 4 skips")
    assert projector["alive"] is True
    assert projector["restarts"] == 0
