"""The worker and the per-type limits (docs/limits.md, "Per-type limits"), on the in-memory
adapter: a task over a limit is reported ``throttled`` with the wait and its handler never
runs; an admitted one runs and gives its lease back; a type without limits never asks.
The limiter's scripts against the real Redis: tests/integration/test_type_limits.py."""

from __future__ import annotations

from typing import Any

from handlers.type_limits import Admission, start_slack_ms
from orchestrator.application.app import KeelApp
from orchestrator.domain.model.messages import CompleteActivity, FailActivity
from tests.unit.handlers.test_worker_loop import Rig

app = KeelApp("worker-limits")
calls: list[str] = []


@app.activity("limited", max_concurrent=1, rate_limit="10/min")
def limited(inp: dict[str, Any]) -> dict[str, Any]:
    calls.append("limited")
    return {"ok": True}


@app.activity("free")
def free(inp: dict[str, Any]) -> dict[str, Any]:
    calls.append("free")
    return {"ok": True}


class FakeRedis:
    def __init__(self) -> None:
        self.removed: list[tuple[str, str]] = []

    def zrem(self, key: str, member: str) -> int:
        self.removed.append((key, member))
        return 1


def _rig(tmp_path, verdicts: list[Admission]) -> tuple[Rig, list[Any]]:
    """The worker loop's rig on this app; the limiter answers ``verdicts`` in turn."""
    calls.clear()
    rig = Rig(tmp_path, app)
    limiter = rig.worker.limits
    limiter.gate = rig.worker.redis_gate
    asked: list[Any] = []

    def admit_now(*args: Any) -> Admission:
        asked.append(args)
        return verdicts.pop(0)

    limiter.admit_now = admit_now  # type: ignore[method-assign]
    limiter.r = FakeRedis()  # type: ignore[assignment]
    return rig, asked


def test_a_task_over_a_limit_is_reported_throttled_and_never_runs(tmp_path):
    wait = Admission(4200, "activity 'limited' is over its rate limit of 10/min; next start")
    rig, asked = _rig(tmp_path, [wait])
    rig.task("wf", "limited", {}, attempt=3)
    assert rig.worker.step()
    assert asked == [("limited", app.handlers["limited"].limits, "wf/limited/1", 3)]
    assert [r.payload for r in rig.reports()] == [
        FailActivity("run#1/step", 3, "throttled", "Throttled", wait.why, 4200)
    ]
    assert calls == [] and rig.worker.throttled == 1 and rig.worker.failed == 0
    assert rig.worker.health()["throttled"] == 1


def test_an_admitted_task_runs_and_gives_its_lease_back(tmp_path):
    lease = Admission(lease="wf/limited/1/1/x", lease_key="keel:mem:lim:conc:limited")
    rig, _ = _rig(tmp_path, [lease])
    rig.task("wf", "limited", {})
    rig.task("wf", "free", {})  # never asks the limiter (no verdict is left for it)
    assert rig.worker.step()
    assert calls == ["limited", "free"]
    assert [type(r.payload) for r in rig.reports()] == [CompleteActivity, CompleteActivity]
    assert rig.worker.limits.r.removed == [("keel:mem:lim:conc:limited", "wf/limited/1/1/x")]  # type: ignore[attr-defined]


def test_a_start_counts_as_lasting_half_a_second_or_a_twentieth_of_its_window():
    assert start_slack_ms(1_000) == 500  # 3/s: a twentieth (50 ms) would be too short
    assert start_slack_ms(10_000) == 500
    assert start_slack_ms(60_000) == 3_000  # 10/min: a call may reach the service 3 s late
    assert start_slack_ms(3_600_000) == 180_000
