"""Synchronous handlers run side by side on the worker's bounded pool (``HandlerThreads``).

Overlap is proven, not timed: handlers that block on a ``threading.Barrier`` until all of
them have started only pass it when they run at once; one at a time, the first one's
wait times out and breaks the barrier for the rest (each reports a failure). The pool's
size (``KEEL_WORKER_THREADS``) bounds how many run at once; async handlers go on on the
loop meanwhile, and a heartbeat, ``activity()`` and the effect claims keep their rules.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from pydantic import ValidationError

from handlers.sdk.activity_context import activity
from handlers.sdk.markers import side_effect
from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings, load_settings
from orchestrator.domain.model.errors import ConfigError
from orchestrator.domain.model.messages import CompleteActivity, FailActivity, HeartbeatActivity
from tests.unit.handlers.test_worker_loop import Rig

#: How long a handler waits for the others at the barrier: a pass takes microseconds, so
#: this is only what a broken (one-at-a-time) worker costs the test before it fails.
BARRIER_S = 5.0

app = KeelApp("worker-sync-tests")
barrier = threading.Barrier(1)
#: Handlers running at this moment and the most there ever were.
running = {"now": 0, "peak": 0}
counting = threading.Lock()
#: ("claim" | "run", idempotency key) in the order they happened.
order: list[tuple[str, str]] = []
released = threading.Event()


def _meet(parties: int, timeout_s: float = BARRIER_S) -> None:
    global barrier
    barrier = threading.Barrier(parties, timeout=timeout_s)
    running.update(now=0, peak=0)


@app.activity("meet")
def meet(inp: dict[str, Any]) -> dict[str, Any]:
    """Waits at the barrier, counting how many handlers are inside at once."""
    with counting:
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
    try:
        barrier.wait()
    finally:
        with counting:
            running["now"] -= 1
    return {"item": inp["item"], "thread": threading.current_thread().name}


@app.activity("wait_for_async")
def wait_for_async(inp: dict[str, Any]) -> dict[str, Any]:
    """Blocks until an async handler of the same batch has run: never, on a held loop."""
    return {"released": released.wait(BARRIER_S)}


@app.activity("release")
async def release(inp: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    released.set()
    return {}


@app.activity("beat")
def beat(inp: dict[str, Any]) -> dict[str, Any]:
    ctx = activity()
    ctx.heartbeat({"done": 1}, force=True)
    return {"key": ctx.idempotency_key, "thread": threading.current_thread().name}


@app.activity("write")
@side_effect
def write(inp: dict[str, Any]) -> dict[str, Any]:
    order.append(("run", activity().idempotency_key))
    return {"written": inp["item"]}


def _rig(tmp_path: Any, threads: int) -> Rig:
    rig = Rig(tmp_path, app)
    rig.worker.threads.close()
    rig.worker = type(rig.worker)(
        rig.settings.model_copy(update={"worker_threads": threads}),
        app,
        adapters=(rig.worker.intake, rig.worker.sink),
        effects=rig.effects,
    )
    rig.worker.redis_gate.initial_s = 0.001
    rig.worker.subscribe()
    return rig


def _fan_out(rig: Rig, wf: str, items: int) -> None:
    for i in range(items):
        rig.task(wf, "meet", {"item": i}, item=i)


def test_n_sync_items_run_at_once_on_one_worker(tmp_path):
    items = 6
    rig = _rig(tmp_path, threads=items)
    _meet(items)
    _fan_out(rig, "wf-fan", items)
    assert rig.worker.step()
    reports = [r.payload for r in rig.reports("wf-fan")]
    assert [type(p) for p in reports] == [CompleteActivity] * items, reports
    results = [json.loads(p.result_json) for p in reports]
    assert sorted(r["item"] for r in results) == list(range(items))
    assert all(r["thread"].startswith("keel-handler") for r in results)
    assert running["peak"] == items
    assert rig.committed("wf-fan") == items


def test_one_thread_runs_them_one_at_a_time_so_the_barrier_breaks(tmp_path):
    """The same items on a pool of one: what the test above would see on a serial worker."""
    rig = _rig(tmp_path, threads=1)
    _meet(2, timeout_s=0.2)  # it times out: what the wait costs here
    _fan_out(rig, "wf-fan", 2)
    assert rig.worker.step()
    reports = [r.payload for r in rig.reports("wf-fan")]
    assert [type(p) for p in reports] == [FailActivity] * 2
    assert {p.error_type for p in reports} == {"BrokenBarrierError"}
    assert running["peak"] == 1


def test_the_pool_size_bounds_how_many_run_at_once(tmp_path):
    rig = _rig(tmp_path, threads=2)
    _meet(2)  # the items pass in pairs: two at once, and never a third beside them
    _fan_out(rig, "wf-fan", 6)
    assert rig.worker.step()
    reports = [r.payload for r in rig.reports("wf-fan")]
    assert [type(p) for p in reports] == [CompleteActivity] * 6, reports
    assert running["peak"] == 2


def test_a_sync_handler_does_not_hold_the_loop_for_async_ones(tmp_path):
    released.clear()
    rig = _rig(tmp_path, threads=2)
    rig.task("wf-1", "wait_for_async", {}, item=0)  # two activities: not kept in order
    rig.task("wf-1", "release", {}, item=1)
    assert rig.worker.step()
    [waited] = [r.payload for r in rig.reports("wf-1") if r.payload.activity_id == "run#1/step[0]"]
    assert waited.result_json == '{"released": true}'


def test_a_heartbeat_and_activity_reach_a_handler_on_a_pool_thread(tmp_path):
    rig = _rig(tmp_path, threads=2)
    rig.task("wf-1", "beat", {})
    assert rig.worker.step()
    [heartbeat, done] = [r.payload for r in rig.reports("wf-1")]
    assert heartbeat == HeartbeatActivity("run#1/step", 1, '{"done": 1}')
    result = json.loads(done.result_json)
    assert result["key"] == "wf-1/beat/1"
    assert result["thread"].startswith("keel-handler")
    assert rig.reports("wf-1")[0].message_id == "task/wf-1/beat/1/beat/1/1"


def test_a_task_waiting_for_a_thread_has_claimed_nothing(tmp_path):
    """With one thread, each side effect is claimed only once the one before it returned:
    a worker killed now leaves one claim in doubt, not the whole batch's."""
    order.clear()
    rig = _rig(tmp_path, threads=1)
    real_begin = rig.effects.begin

    def begin(key: str, attempt: int, token: str | None = None) -> Any:
        order.append(("claim", key))
        return real_begin(key, attempt, token)

    rig.effects.begin = begin  # type: ignore[method-assign]
    for i in range(3):
        rig.task("wf-1", "write", {"item": i}, item=i)
    assert rig.worker.step()
    assert [what for what, _ in order] == ["claim", "run"] * 3
    assert [key for what, key in order if what == "run"] == [
        key for what, key in order if what == "claim"
    ]
    assert {r["state"] for r in rig.effects.records.values()} == {"committed"}


def test_the_pool_size_is_a_validated_setting(monkeypatch):
    assert Settings().worker_threads == 16
    with pytest.raises(ValidationError):
        Settings(worker_threads=0)
    monkeypatch.setenv("KEEL_WORKER_THREADS", "0")
    with pytest.raises(ConfigError, match="KEEL_WORKER_THREADS=0"):
        load_settings()
    monkeypatch.setenv("KEEL_WORKER_THREADS", "32")
    assert load_settings().worker_threads == 32
