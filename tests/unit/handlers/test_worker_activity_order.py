"""Which tasks of one batch the worker runs side by side (handlers/worker.py ``_run_batch``).

The activities of one workflow (a fan-out's items, parallel steps) overlap; the tasks of
one activity do not: its attempts, its status query and its compensation run in log order,
so a query never answers "not found" beside the write it asks about.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from handlers.effects import RedisGate
from handlers.worker import Worker
from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import ActivityTask, Envelope
from orchestrator.io.memory import MemoryBroker, MemoryGroupIntake, MemoryOutcomeSink
from orchestrator.payload_schemas.codec import Codec
from tests.unit.handlers.test_worker_loop import MemoryEffects

codec = Codec()

app = KeelApp("worker-order-tests")
#: (activity id, "start" | "end") in the order the handlers saw them.
seen: list[tuple[str, str]] = []


@app.activity("slow")
async def slow(inp: dict[str, Any]) -> dict[str, Any]:
    seen.append((inp["id"], "start"))
    await asyncio.sleep(0.05)
    seen.append((inp["id"], "end"))
    return {}


class Rig:
    """One worker of ``app`` on the in-memory broker (no Kafka, no Redis)."""

    def __init__(self, tmp_path: Any) -> None:
        settings = Settings(
            topic_prefix="mem",
            partitions=4,
            home=tmp_path,
            bootstrap_servers="127.0.0.1:1",
            redis_url="redis://127.0.0.1:1/0",
        )
        self.broker = MemoryBroker(4)
        self.tasks = settings.topic("activity-tasks")
        intake = MemoryGroupIntake(self.broker, self.tasks, "mem.workers")
        self.worker = Worker(
            settings,
            app,
            adapters=(intake, MemoryOutcomeSink(self.broker)),
            effects=MemoryEffects(),
        )
        self.worker.redis_gate = RedisGate(self.worker._stop, initial_s=0.001, max_s=0.002)
        self.worker.subscribe()


def _task(rig: Rig, wf: str, activity_id: str, attempt: int = 1) -> None:
    env: Envelope[Any] = Envelope(
        message_id=f"task/{wf}/{activity_id}/{attempt}",
        workflow_id=wf,
        run_id="r1",
        seq=0,
        type="ActivityTask",
        recorded_at=1,
        payload=ActivityTask(
            activity_id, "slow", "step", json.dumps({"id": activity_id}), 1, attempt, "k"
        ),
    )
    rig.broker.produce(rig.tasks, codec.encode(env), wf.encode())


def _peak(events: list[tuple[str, str]]) -> int:
    running = peak = 0
    for _, what in events:
        running += 1 if what == "start" else -1
        peak = max(peak, running)
    return peak


def test_a_workflows_activities_overlap_and_one_activitys_tasks_keep_log_order(tmp_path):
    seen.clear()
    rig = Rig(tmp_path)
    for i in range(3):
        _task(rig, "wf-fan", f"run#1/ocr[{i}]")
    assert rig.worker.step()
    assert _peak(seen) == 3, seen

    seen.clear()
    _task(rig, "wf-post", "run#1/post")
    _task(rig, "wf-post", "run#1/post", attempt=2)
    _task(rig, "wf-post", "run#1/post/query/1")
    _task(rig, "wf-post", "run#1/post/undo")
    assert rig.worker.step()
    assert _peak(seen) == 1, seen
    assert [aid for aid, what in seen if what == "start"] == [
        "run#1/post",
        "run#1/post",
        "run#1/post/query/1",
        "run#1/post/undo",
    ]
