"""An orchestrator on the in-memory adapter, and a fake worker: unit tests of the loop."""

from __future__ import annotations

import itertools
import json
from typing import Any

from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import (
    ActivityTask,
    CompleteActivity,
    Envelope,
    SignalWorkflow,
    StartWorkflow,
)
from orchestrator.engine.orchestrator import Orchestrator
from orchestrator.engine.runtime_context import Topics
from orchestrator.examples import app as example_app
from orchestrator.io.memory import MemoryBroker, MemoryCommandIntake, MemoryEventLog
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import now_ms

codec = Codec()


class MemoryRig:
    """One in-memory broker, an orchestrator on it, and a client and worker that feed it."""

    def __init__(self, tmp_path, partitions: int = 4, app=example_app, **orch_kw: Any) -> None:
        self.settings = Settings(
            topic_prefix="mem",
            partitions=partitions,
            home=tmp_path,
            bootstrap_servers="127.0.0.1:1",
            redis_url="redis://127.0.0.1:1/0",
        )
        self.app = app
        self.topics = Topics.for_prefix(self.settings.topic)
        self.broker = MemoryBroker(partitions)
        self.orch_kw = orch_kw
        self.orch = self.new_orchestrator()
        self._tasks_seen = 0
        self._message_numbers = itertools.count(1)

    def new_orchestrator(self, **kw: Any) -> Orchestrator:
        intake = MemoryCommandIntake(self.broker, self.topics.commands, "mem.orchestrator")
        log = MemoryEventLog(self.broker, "mem.orchestrator.rig", intake)
        orch = Orchestrator(
            self.settings, self.app, adapters=(intake, log), **{**self.orch_kw, **kw}
        )
        orch.subscribe()
        return orch

    # -- a client ------------------------------------------------------------------
    def send(self, wf: str, payload: Any, mid: str | None = None, **produce: Any) -> None:
        env: Envelope[Any] = Envelope(
            # a counter, not the clock: on a fast host two sends share a millisecond,
            # and the orchestrator rightly drops a message id it has seen
            message_id=mid or f"{wf}/{type(payload).__name__}/{next(self._message_numbers)}",
            workflow_id=wf,
            run_id="",
            seq=0,
            type=type(payload).__name__,
            recorded_at=now_ms(),
            payload=payload,
        )
        produce.setdefault("key", wf.encode())
        self.broker.produce(self.topics.commands, value=codec.encode(env), **produce)

    def start(self, wf: str, name: str, inp: Any, mid: str | None = None) -> None:
        self.send(wf, StartWorkflow(name, None, json.dumps(inp)), mid)

    def signal(self, wf: str, name: str, payload: Any) -> None:
        self.send(wf, SignalWorkflow(name, json.dumps(payload)))

    # -- a worker ------------------------------------------------------------------
    def work(self) -> int:
        """Run every new task with the app's handler and report its completion."""
        tasks = self.broker.records(self.topics.activity_tasks)
        new = [r for r in tasks if (r.topic, r.partition, r.offset) not in self._done()]
        for rec in new:
            env = codec.decode(rec.value)
            t: ActivityTask = env.payload
            handler = self.app.handler(t.activity_type)
            raw = json.loads(t.input_json)
            arg = handler.input_model.model_validate(raw) if handler.input_model else raw
            result = handler.fn(arg)
            out = (
                result.model_dump_json()
                if hasattr(result, "model_dump_json")
                else json.dumps(result)
            )
            self.send(env.workflow_id, CompleteActivity(t.activity_id, t.attempt, out))
            self._seen.add((rec.topic, rec.partition, rec.offset))
        return len(new)

    def _done(self) -> set:
        if not hasattr(self, "_seen"):
            self._seen: set = set()
        return self._seen

    def run(self, rounds: int = 50) -> None:
        """Steps and worker rounds until nothing moves (bounded)."""
        for _ in range(rounds):
            before = len(self.broker.records(self.topics.events))
            self.orch.step()
            worked = self.work()
            if not worked and len(self.broker.records(self.topics.events)) == before:
                self.orch.step()
                if len(self.broker.records(self.topics.events)) == before and not self.work():
                    return

    # -- what the log holds ----------------------------------------------------------
    def events(self, wf: str | None = None) -> list[Envelope[Any]]:
        envs = [codec.decode(r.value) for r in self.broker.records(self.topics.events)]
        return [e for e in envs if wf is None or e.workflow_id == wf]

    def letters(self) -> list[Envelope[Any]]:
        return [codec.decode(r.value) for r in self.broker.records(self.topics.dlq)]
