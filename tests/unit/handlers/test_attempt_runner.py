"""One activity-attempt runner: the worker and a local step report an attempt the same way.

The worker (handlers/worker.py) and the engine's local steps
(orchestrator/engine/local_activities.py) run each attempt through the
``AttemptRunner`` their composition root built, so the same handler and input give the
same report (failure class, error type, message, retry wait; a completion's schema
version) on either path. The runner holds its process's sealing keys, so two workers in
one process with different keys never open each other's values.
"""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from handlers.attempt_runner import AttemptRunner
from handlers.sdk.activity_errors import PermanentError, TransientError
from handlers.worker import Worker
from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    ActivityTask,
    CompleteActivity,
    Envelope,
    FailActivity,
)
from orchestrator.engine.local_activities import LocalActivities, LocalRun
from orchestrator.io.memory import MemoryBroker, MemoryGroupIntake, MemoryOutcomeSink
from orchestrator.payload_schemas.codec import Codec
from orchestrator.testing.memory_stores import MemoryEffectBook
from orchestrator.trust.sealing import SealKeySource, Sensitive, new_key_entry, parse_keys

codec = Codec()
app = KeelApp("attempt-runner-tests")


class Total(BaseModel):
    schema_version: ClassVar[int] = 1
    n: int


class Amount(BaseModel):
    n: int


@app.activity("total", input=Amount, output=Total)
def total(inp: Amount) -> Total:
    return Total(n=inp.n * 2)


@app.activity("total_async", input=Amount, output=Total)
async def total_async(inp: Amount) -> Total:
    return Total(n=inp.n * 3)


@app.activity("busy")
def busy(inp: dict[str, Any]) -> dict[str, Any]:
    raise TransientError("the bank said 429", retry_after_s=2.5)


@app.activity("refused")
async def refused(inp: dict[str, Any]) -> dict[str, Any]:
    raise PermanentError("account closed")


@app.activity("broken")
def broken(inp: dict[str, Any]) -> dict[str, Any]:
    raise ValueError("no such account\nsecond line")


@app.activity("bad_result", output=Total)
def bad_result(inp: dict[str, Any]) -> dict[str, Any]:
    return {"n": "many"}


def _settings(tmp_path: Any, **extra: Any) -> Settings:
    return Settings(
        topic_prefix="mem",
        partitions=1,
        home=tmp_path,
        bootstrap_servers="127.0.0.1:1",
        redis_url="redis://127.0.0.1:1/0",
        **extra,
    )


def _worker(settings: Settings, application: KeelApp, **kw: Any) -> tuple[Worker, MemoryBroker]:
    broker = MemoryBroker(1)
    intake = MemoryGroupIntake(broker, settings.topic("activity-tasks"), "mem.workers")
    worker = Worker(
        settings,
        application,
        adapters=(intake, MemoryOutcomeSink(broker)),
        effects=MemoryEffectBook(),
        hard_exit_on_stall=False,
        **kw,
    )
    worker.subscribe()
    return worker, broker


def _worker_report(worker: Worker, broker: MemoryBroker, activity: str, inp: str) -> Any:
    """What ``worker`` reports for one task of ``activity`` with input ``inp``."""
    settings = worker.settings
    task = ActivityTask("run#1/step", activity, "step", inp, 1, 1, f"wf/{activity}/1")
    env: Envelope[Any] = Envelope(
        message_id=f"task/{activity}",
        workflow_id="wf",
        run_id="r1",
        seq=0,
        type="ActivityTask",
        recorded_at=1,
        payload=task,
    )
    before = len(broker.records(settings.topic("commands")))
    broker.produce(settings.topic("activity-tasks"), codec.encode(env), b"wf")
    assert worker.step()
    [report] = broker.records(settings.topic("commands"))[before:]
    return codec.decode(report.value or b"").payload


def _local_report(local: LocalActivities, activity: str, inp: str) -> Any:
    """What a local step of ``activity`` with input ``inp`` reports."""
    s = ActivityScheduled("run#1/step", activity, "step", inp, 1, 1, f"wf/{activity}/1")
    [report] = local.run([LocalRun(0, "wf", "r1", "ev", None, s, 2000, True)])
    return report


CASES = [
    ("total", '{"n": 21}'),
    ("total_async", '{"n": 2}'),
    ("total", '{"n": "x"}'),
    ("total", "{not json"),
    ("busy", "{}"),
    ("refused", "{}"),
    ("broken", "{}"),
    ("bad_result", "{}"),
]


def test_the_worker_and_a_local_step_run_one_runner_and_report_alike(tmp_path):
    runner = AttemptRunner(app, seal_keys=SealKeySource())
    worker, broker = _worker(_settings(tmp_path), app, attempts=runner)
    local = LocalActivities(
        app, redis_url=None, topic_prefix="mem", stop=threading.Event(), attempts=runner
    )
    assert worker.attempts is runner and local.attempts is runner
    try:
        for activity, inp in CASES:
            assert _worker_report(worker, broker, activity, inp) == _local_report(
                local, activity, inp
            ), activity
    finally:
        worker._close()
    # the reports themselves: a completion carries its schema version, a failure its class
    assert _local_report(local, "total", '{"n": 21}') == CompleteActivity(
        "run#1/step", 1, '{"n":42}', 1
    )
    busy_report = _local_report(local, "busy", "{}")
    assert busy_report == FailActivity(
        "run#1/step", 1, "transient", "TransientError", "the bank said 429", 2500
    )
    assert _local_report(local, "broken", "{}") == FailActivity(
        "run#1/step", 1, "transient", "ValueError", "no such account", 0
    )
    local.close()


class Call(BaseModel):
    api_key: Sensitive[str]


class Echo(BaseModel):
    echo: Sensitive[str]


sealed_app = KeelApp("attempt-runner-sealed")


@sealed_app.activity("echo", input=Call, output=Echo)
def echo(call: Call) -> Echo:
    return Echo(echo=call.api_key)


def test_two_workers_in_one_process_keep_their_own_seal_keys(tmp_path):
    from pydantic import SecretStr

    entry_a, entry_b = new_key_entry("a"), new_key_entry("b")
    keys_a = parse_keys(entry_a, "KEEL_SEAL_KEY")
    keys_b = parse_keys(entry_b, "KEEL_SEAL_KEY")
    worker_a, broker_a = _worker(_settings(tmp_path / "a", seal_key=SecretStr(entry_a)), sealed_app)
    worker_b, broker_b = _worker(_settings(tmp_path / "b", seal_key=SecretStr(entry_b)), sealed_app)
    try:
        sealed_for_a = json.dumps(keys_a.seal_fields(Call, {"api_key": "sk-a"}))
        sealed_for_b = json.dumps(keys_b.seal_fields(Call, {"api_key": "sk-b"}))
        done_a = _worker_report(worker_a, broker_a, "echo", sealed_for_a)
        done_b = _worker_report(worker_b, broker_b, "echo", sealed_for_b)
        # each opened its own input and sealed its result with its own key
        assert keys_a.unseal(json.loads(done_a.result_json)["echo"]) == "sk-a"
        assert keys_b.unseal(json.loads(done_b.result_json)["echo"]) == "sk-b"
        assert "sk-a" not in done_a.result_json and "sk-b" not in done_b.result_json
        # and neither holds the other's key, whichever was built or ran last
        refused = _worker_report(worker_b, broker_b, "echo", sealed_for_a)
        assert isinstance(refused, FailActivity)
        assert (refused.failure_class, refused.error_type) == ("permanent", "BadTaskInput")
        assert refused.message == (
            "input of activity 'echo': sealed value uses key 'a', which KEEL_SEAL_KEY does "
            "not hold (known: b); keep retired keys until no run holds their values"
        )
        with pytest.raises(Exception, match="key 'b'"):
            keys_a.unseal(json.loads(done_b.result_json)["echo"])
    finally:
        worker_a._close()
        worker_b._close()
