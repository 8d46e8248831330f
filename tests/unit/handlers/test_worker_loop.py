"""The worker loop on the in-memory adapter: run, report, dead-letter, retry, commit, recover.

No broker, no Redis: the effect store is a small in-memory fake with the claim rules of
``handlers.effects`` (the Redis store itself is covered by tests/integration). The same
behaviour on the real broker: tests/integration/test_activities.py, test_worker_poison.py,
test_worker_effects.py and tests/fault/test_worker_crashes.py.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException

from handlers.effects import Claim, ClaimOutcome, RedisGate
from handlers.sdk.markers import side_effect
from handlers.worker import Worker
from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.domain.model.messages import (
    ActivityTask,
    CompleteActivity,
    Envelope,
    FailActivity,
    HeartbeatActivity,
    StartWorkflow,
)
from orchestrator.io.kafka.broker_errors import classify
from orchestrator.io.memory import MemoryBroker, MemoryGroupIntake, MemoryOutcomeSink
from orchestrator.io.ports import ConsumerReset, Stopping
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.clock import ManualClock

codec = Codec()
GROUP = "mem.workers"


class MemoryEffects:
    """The effect store's claim rules (``handlers.effects._BEGIN``) over a dict."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def begin(self, key: str, attempt: int, token: str | None = None) -> Claim:
        rec = self.records.get(key)
        if rec and rec["state"] == "committed":
            return Claim(ClaimOutcome.COMMITTED, result_json=rec["result"])
        if rec and rec["state"] == "refused":
            return Claim(ClaimOutcome.REFUSED, error_type=rec["error_type"], message=rec["msg"])
        top = rec["top"] if rec else 0
        if attempt < top:
            return Claim(ClaimOutcome.STALE)
        if rec and rec["state"] == "pending" and top == attempt:
            return Claim(ClaimOutcome.RUN if rec["owner"] == token else ClaimOutcome.IN_DOUBT)
        self.records[key] = {"state": "pending", "top": attempt, "owner": token}
        return Claim(ClaimOutcome.RUN)

    def commit(self, key: str, result_json: str) -> None:
        self.records[key].update(state="committed", result=result_json)

    def refuse(self, key: str, error_type: str, message: str, raw: str) -> None:
        self.records[key].update(state="refused", error_type=error_type, msg=message)

    def release(self, key: str, attempt: int | None = None) -> bool:
        rec = self.records.get(key)
        if rec and rec["state"] == "pending" and (attempt is None or rec["top"] == attempt):
            rec["state"] = "released"
            return True
        return False


app = KeelApp("worker-loop-tests")
postings: list[dict[str, Any]] = []


@app.activity("add_one")
def add_one(inp: dict[str, Any]) -> dict[str, Any]:
    return {"n": inp["n"] + 1}


@app.activity("post")
@side_effect
def post(inp: dict[str, Any]) -> dict[str, Any]:
    postings.append(inp)
    return {"posting": len(postings)}


@app.activity("boom")
def boom(inp: dict[str, Any]) -> dict[str, Any]:
    raise ValueError("the handler broke")


class Rig:
    def __init__(self, tmp_path, application: KeelApp = app, **worker_kw: Any) -> None:
        postings.clear()
        self.settings = Settings(
            topic_prefix="mem",
            partitions=4,
            home=tmp_path,
            bootstrap_servers="127.0.0.1:1",
            redis_url="redis://127.0.0.1:1/0",
        )
        self.broker = MemoryBroker(4, classify=classify)
        self.tasks = self.settings.topic("activity-tasks")
        self.intake = self.new_intake()
        self.effects = MemoryEffects()
        self.worker = Worker(
            self.settings,
            application,
            adapters=(self.intake, MemoryOutcomeSink(self.broker)),
            effects=self.effects,
            **worker_kw,
        )
        self.worker.redis_gate = RedisGate(self.worker._stop, initial_s=0.001, max_s=0.002)
        self.worker.subscribe()

    def new_intake(self) -> MemoryGroupIntake:
        return MemoryGroupIntake(self.broker, self.settings.topic("activity-tasks"), GROUP)

    def task(
        self, wf: str, activity: str, inp: Any, *, attempt: int = 1, raw=None, item=None
    ) -> None:
        """A task of ``wf``; with ``item``, that item of a fan-out (its own id and key)."""
        tag, n = ("", 1) if item is None else (f"[{item}]", item + 1)
        env: Envelope[Any] = Envelope(
            message_id=f"task/{wf}/{activity}{tag}/{attempt}",
            workflow_id=wf,
            run_id="r1",
            seq=0,
            type="ActivityTask",
            recorded_at=1,
            payload=ActivityTask(
                f"run#1/step{tag}",
                activity,
                "step",
                json.dumps(inp),
                1,
                attempt,
                f"{wf}/{activity}/{n}",
            ),
        )
        self.broker.produce(self.tasks, codec.encode(env) if raw is None else raw, wf.encode())

    def reports(self, wf: str | None = None) -> list[Envelope[Any]]:
        envs = [codec.decode(r.value) for r in self.broker.records(self.settings.topic("commands"))]
        return [e for e in envs if wf is None or e.workflow_id == wf]

    def letters(self) -> list[Any]:
        return [
            codec.decode(r.value).payload for r in self.broker.records(self.settings.topic("dlq"))
        ]

    def committed(self, wf: str) -> int | None:
        from orchestrator.io.partitioning import partition_for

        return self.broker.committed.get((GROUP, self.tasks, partition_for(wf.encode(), 4)))


def test_a_task_runs_and_its_report_is_committed_after_delivery(tmp_path):
    rig = Rig(tmp_path)
    rig.task("wf-1", "add_one", {"n": 41})
    rig.task("wf-1", "boom", {})
    assert rig.worker.step()
    [done, failed] = rig.reports("wf-1")
    assert done.payload == CompleteActivity("run#1/step", 1, '{"n": 42}')
    assert done.causation_id == "task/wf-1/add_one/1"
    assert done.message_id == "task/wf-1/add_one/1/report/1"
    assert isinstance(failed.payload, FailActivity)
    assert failed.payload.message == "the handler broke"
    assert rig.committed("wf-1") == 2
    assert rig.worker.assigned == {0, 1, 2, 3}
    assert rig.worker.last_commit_at is not None


def test_poison_tasks_are_dead_lettered_and_the_batch_goes_on(tmp_path):
    rig = Rig(tmp_path)
    not_a_task: Envelope[Any] = Envelope(
        "start/1", "wf", "", 0, "StartWorkflow", 1, StartWorkflow("x", 1, "{}")
    )
    rig.broker.produce(rig.tasks, None, b"wf")
    rig.task("wf", "add_one", None, raw=b"garbage-bytes")
    rig.task("wf", "add_one", None, raw=codec.encode(not_a_task))
    rig.task("wf", "add_one", {"n": 1})
    rig.worker.step()
    assert [d.reason for d in rig.letters()] == [
        "task record has no value (null)",
        "undecodable task: bad marker: expected c301, got 6761",
        "StartWorkflow is not an activity task",
    ]
    assert [d.source_offset for d in rig.letters()] == [0, 1, 2]
    [report] = rig.reports("wf")
    assert report.payload.result_json == '{"n": 2}'
    assert rig.committed("wf") == 4
    assert rig.worker.dead_letters == 3


def test_an_oversized_report_is_never_sent_and_its_task_is_dead_lettered(tmp_path):
    rig = Rig(tmp_path)
    huge = "w" * 520_000
    env: Envelope[Any] = Envelope(
        "big/1", huge, "r1", 0, "ActivityTask", 1,
        ActivityTask("a", "add_one", "step", '{"n": 1}', 1, 1, "k"),
    )  # fmt: skip
    rig.broker.produce(rig.tasks, codec.encode(env), None)
    rig.worker.step()
    assert rig.reports() == []
    [letter] = rig.letters()
    assert letter.reason.startswith("the report of this task could not be produced: ")
    assert letter.reason.endswith(" bytes is over the 1,000,000-byte record limit")


def test_a_report_that_fails_to_deliver_reruns_the_batch_and_commits_only_after(tmp_path):
    rig = Rig(tmp_path)
    rig.broker.inject(
        "deliver", KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, retriable=True))
    )
    rig.task("wf-1", "add_one", {"n": 1})
    rig.worker.step()
    assert rig.reports() == []
    assert rig.committed("wf-1") is None  # nothing acknowledged: nothing committed
    assert rig.worker.reruns == 1
    rig.worker.step()  # the batch runs again from its first offset
    [report] = rig.reports("wf-1")
    assert report.payload.result_json == '{"n": 2}'
    assert rig.committed("wf-1") == 1


def test_a_report_refused_for_good_dead_letters_its_task_and_commits(tmp_path):
    rig = Rig(tmp_path)
    rig.broker.inject("deliver", KafkaException(KafkaError(KafkaError.INVALID_RECORD)))
    rig.task("wf-1", "add_one", {"n": 1})
    rig.worker.step()
    assert rig.reports() == []
    [letter] = rig.letters()
    assert letter.reason.startswith("the report of this task was refused by Kafka: ")
    assert rig.committed("wf-1") == 1


def test_a_redelivered_side_effect_task_reuses_the_effect_record(tmp_path):
    rig = Rig(tmp_path)
    lost = KafkaException(KafkaError(KafkaError._TRANSPORT, retriable=True))
    rig.broker.inject("deliver", lost, times=2)  # the start report and the outcome
    rig.task("wf-1", "post", {"amount": 5})
    rig.worker.step()  # posted, but the reports were lost: the batch runs again
    rig.worker.step()
    rig.task("wf-1", "post", {"amount": 5})  # and the orchestrator's redelivery, later
    rig.worker.step()
    assert postings == [{"amount": 5}]  # one write, whatever was redelivered
    assert [r.payload.result_json for r in rig.reports("wf-1")] == ['{"posting": 1}'] * 2
    assert rig.effects.records["wf-1/post/1"]["state"] == "committed"


def test_a_worker_crash_mid_call_leaves_the_redelivered_attempt_in_doubt(tmp_path):
    rig = Rig(tmp_path)
    rig.effects.records["wf-1/post/1"] = {"state": "pending", "top": 1, "owner": "dead"}
    rig.task("wf-1", "post", {"amount": 5})
    rig.worker.step()
    [report] = rig.reports("wf-1")
    assert report.payload.failure_class == "unknown"
    assert report.payload.message == (
        "attempt 1 was dispatched before and never reported (worker crash?); its outcome is unknown"
    )
    assert postings == []


def test_a_redis_outage_is_waited_out_and_shown_in_health(tmp_path):
    rig = Rig(tmp_path)
    real = rig.effects.begin
    calls = []

    def flaky(*args: Any) -> Claim:
        calls.append(args)
        if len(calls) == 1:
            raise redis.ConnectionError("injected: Redis away")
        return real(*args)

    rig.effects.begin = flaky  # type: ignore[method-assign]
    rig.task("wf-1", "post", {"amount": 1})
    rig.worker.step()
    beat, done = rig.reports("wf-1")  # the start, reported once the claim is taken
    assert beat.payload == HeartbeatActivity("run#1/step", 1, "null", side_effect=True)
    assert done.payload.result_json == '{"posting": 1}'
    health = rig.worker.health()
    assert health["redis"]["outages"] == 1 and health["redis"]["down"] is False


def test_a_failed_offset_commit_redelivers_the_batch_after_a_rebalance(tmp_path):
    rig = Rig(tmp_path)
    rig.broker.inject("commit_offsets", UnavailableError("injected: rebalance in progress"))
    rig.task("wf-1", "add_one", {"n": 1})
    rig.worker.step()
    assert rig.committed("wf-1") is None
    assert rig.worker.commit_failures == 1 and rig.worker.last_commit_at is None
    rig.intake.recreate()  # a rebalance: the member reads from the committed offsets
    rig.worker.step()
    assert len(rig.reports("wf-1")) == 2  # at least once; the orchestrator drops the copy
    assert rig.committed("wf-1") == 1


def test_a_fatal_consumer_is_recreated_and_the_group_joined_again(tmp_path):
    rig = Rig(tmp_path)
    rig.worker.step()
    assert rig.worker.assigned == {0, 1, 2, 3}
    rig.broker.inject("poll", ConsumerReset("injected: static member fenced"))
    rig.task("wf-1", "add_one", {"n": 1})
    rig.worker.step()
    assert rig.intake.recreated == 1 and rig.worker.consumer_resets == 1
    assert rig.worker.assigned == set()  # revoked with the old consumer
    rig.worker.step()
    assert rig.worker.assigned == {0, 1, 2, 3}
    assert len(rig.reports("wf-1")) == 1
    assert rig.worker.health()["consumer_resets"] == 1


def test_a_reset_loop_exits_for_the_supervisor(tmp_path):
    rig = Rig(tmp_path, max_resets=2)
    rig.broker.inject("poll", ConsumerReset("injected: fatal"), times=3)
    rig.worker.step()
    rig.worker.step()
    with pytest.raises(SystemExit) as exit_:
        rig.worker.step()
    assert exit_.value.code == 70


def test_run_stops_on_request_and_writes_its_status_file(tmp_path, caplog):
    rig = Rig(tmp_path, status_interval_s=0.0)
    rig.task("wf-1", "add_one", {"n": 1})
    polls = []
    real_poll = rig.intake.poll

    def poll(max_records: int, timeout_s: float):
        polls.append(1)
        if len(polls) == 3:
            raise Stopping("stopped while waiting for poll")  # SIGTERM mid-poll
        return real_poll(max_records, timeout_s)

    rig.intake.poll = poll  # type: ignore[method-assign]
    rig.worker.subscribe = lambda: None  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="keel.health"):
        rig.worker.run()
    assert len(polls) == 3
    status = json.loads((tmp_path / "status" / f"worker-{rig.worker.instance_id}.json").read_text())
    assert status["role"] == "worker" and status["state"] == "stopped"
    assert status["assigned_partitions"] == [0, 1, 2, 3]
    assert status["last_commit_age_s"] is not None
    assert status["consumer_errors"] == 0 and status["consumer_resets"] == 0
    assert status["redis"] == {"down": False, "down_for_s": None, "outages": 0}
    assert status["completed"] == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("health:")]
    assert lines and lines[-1].startswith("health: partitions=[0, 1, 2, 3] last_commit_age_s=")
    assert "consumer_resets=0 stalled_calls=0 redis=up completed=1" in lines[-1]


def test_stop_while_redis_is_away_commits_nothing_of_the_batch(tmp_path):
    rig = Rig(tmp_path)

    def away(*args: Any) -> Claim:
        rig.worker.stop()
        raise redis.ConnectionError("injected: Redis away")

    rig.effects.begin = away  # type: ignore[method-assign]
    rig.task("wf-1", "post", {"amount": 1})
    assert rig.worker.step() is False
    assert rig.committed("wf-1") is None
    assert rig.reports() == []


def test_a_dead_letter_drops_a_value_too_large_to_keep_and_says_where_it_stays(tmp_path):
    rig = Rig(tmp_path)
    rig.broker.produce(rig.tasks, b"x" * 999_900, b"garbage")
    rig.worker.step()
    [letter] = rig.letters()
    assert letter.reason == (
        "undecodable task: bad marker: expected c301, got 7878 [the 999,900-byte record is "
        f"too large to keep here; it stays at {rig.tasks}[{letter.source_partition}]@0]"
    )
    assert letter.value is None and letter.key == b"garbage"


def test_a_dead_letter_is_recorded_at_the_workers_clock_not_the_hosts(tmp_path):
    clock = ManualClock(start_ms=1_000_000_000_000)  # 2001: far from the host's time
    clock.advance(42.0)
    rig = Rig(tmp_path, clock=clock)
    rig.broker.produce(rig.tasks, b"\x00garbage", b"wf-x")
    rig.worker.step()
    (record,) = rig.broker.records(rig.settings.topic("dlq"))
    letter = codec.decode(record.value)
    assert letter.payload.reason.startswith("undecodable task"), letter.payload.reason
    assert letter.recorded_at == 1_000_000_042_000


def test_the_worker_warms_its_sink_before_it_subscribes(tmp_path):
    """``Worker.run`` readies the report producer before any task can reach it."""
    rig = Rig(tmp_path)
    order: list[str] = []
    sink = rig.worker.sink
    warm, subscribe = sink.warm, rig.worker.subscribe

    def warmed() -> None:
        order.append("warm")
        warm()

    def subscribed() -> None:
        order.append("subscribe")
        subscribe()
        rig.worker.stop()  # one look is enough: run returns

    sink.warm = warmed  # type: ignore[method-assign]
    rig.worker.subscribe = subscribed  # type: ignore[method-assign]
    rig.worker.run()
    assert order == ["warm", "subscribe"]
