"""The worker and the per-type limits (docs/limits.md, "Per-type limits"), on the in-memory
adapter: a task over a limit is reported ``throttled`` with the wait and its handler never
runs; an admitted one runs and gives its lease back; a type without limits never asks.
The limiter's scripts against the real Redis: tests/integration/test_type_limits.py."""

from __future__ import annotations

from typing import Any

from handlers.sdk.markers import side_effect
from handlers.type_limits import Admission, start_slack_ms
from orchestrator.application.activity_limits import RateLimit
from orchestrator.application.app import KeelApp
from orchestrator.domain.model.messages import ActivityTask, CompleteActivity, FailActivity
from tests.unit.handlers.test_worker_loop import Rig

app = KeelApp("worker-limits")
calls: list[str] = []


@app.activity("limited", max_concurrent=1, rate_limit="10/min")
def limited(inp: dict[str, Any]) -> dict[str, Any]:
    calls.append("limited")
    return {"ok": True}


@app.activity("paced", rate_limit=RateLimit(10, per=5))
def paced(inp: dict[str, Any]) -> dict[str, Any]:
    calls.append("paced")
    return {"ok": True}


@app.activity("paced_post", rate_limit=RateLimit(10, per=5))
@side_effect
def paced_post(inp: dict[str, Any]) -> dict[str, Any]:
    calls.append("paced_post")
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

    def readmit_now(*args: Any) -> Admission:
        asked.append(("again", *args))
        return verdicts.pop(0)

    limiter.admit_now = admit_now  # type: ignore[method-assign,assignment]
    limiter.readmit_now = readmit_now  # type: ignore[method-assign,assignment]
    limiter.monotonic = lambda: 100.0  # type: ignore[method-assign]
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


# -- a granted start confirmed just before its call (handlers/type_limits.py, "confirmation")
LAPSED = Admission(start="g:wf/paced/1/1/old", call_by=99.75)  # granted; its call was due by 99.75
FRESH = Admission(start="g:wf/paced/1/1/new", call_by=100.25)
OVER = Admission(3100, "activity 'paced' is over its rate limit of 10/5s; next start reserved")


def test_a_start_still_fresh_at_its_call_is_not_asked_again(tmp_path):
    rig, asked = _rig(tmp_path, [FRESH])
    rig.task("wf", "paced", {})
    assert rig.worker.step()
    assert calls == ["paced"] and len(asked) == 1
    assert [type(r.payload) for r in rig.reports()] == [CompleteActivity]


def test_a_start_that_lapsed_before_its_call_is_admitted_again_and_then_runs(tmp_path):
    rig, asked = _rig(tmp_path, [LAPSED, FRESH])
    rig.task("wf", "paced", {}, attempt=2)
    assert rig.worker.step()
    limits = app.handlers["paced"].limits
    task = asked[1][3]
    assert asked[1] == ("again", "paced", limits, task, LAPSED)
    assert (task.idempotency_key, task.attempt) == ("wf/paced/1", 2)
    assert calls == ["paced"] and rig.worker.throttled == 0
    assert [type(r.payload) for r in rig.reports()] == [CompleteActivity]


def test_a_lapsed_start_now_over_the_rate_is_throttled_and_never_called(tmp_path):
    rig, asked = _rig(tmp_path, [LAPSED, OVER])
    rig.task("wf", "paced", {}, attempt=4)
    assert rig.worker.step()
    assert [a[0] for a in asked] == ["paced", "again"]
    assert calls == [] and rig.worker.throttled == 1 and rig.worker.failed == 0
    assert [r.payload for r in rig.reports()] == [
        FailActivity("run#1/step", 4, "throttled", "Throttled", OVER.why, 3100)
    ]


def test_a_lapsed_side_effect_over_the_rate_releases_its_claim_uncalled(tmp_path):
    rig, asked = _rig(tmp_path, [LAPSED, OVER, FRESH])
    rig.task("wf", "paced_post", {}, attempt=1)
    assert rig.worker.step()
    assert calls == [] and [a[0] for a in asked] == ["paced_post", "again"]
    # claimed, then released: no start was reported, and the next attempt may call
    assert rig.effects.records["wf/paced_post/1"]["state"] == "released"
    assert [r.payload for r in rig.reports()] == [
        FailActivity("run#1/step", 1, "throttled", "Throttled", OVER.why, 3100)
    ]
    rig.task("wf", "paced_post", {}, attempt=2)
    assert rig.worker.step()
    assert calls == ["paced_post"]
    assert rig.effects.records["wf/paced_post/1"]["state"] == "committed"


class ScriptStub:
    """A client whose scripts answer ``verdicts`` in turn and record their arguments."""

    def __init__(self, verdicts: list[list[Any]]) -> None:
        self.verdicts = verdicts
        self.calls: list[list[Any]] = []

    def register_script(self, text: str) -> Any:
        def run(keys: list[str], args: list[Any]) -> list[Any]:
            self.calls.append(args)
            return self.verdicts.pop(0)

        return run


def test_a_grant_must_reach_its_call_within_half_its_slack_and_a_readmission_drops_it():
    import threading

    from handlers.effects import RedisGate
    from handlers.type_limits import TypeLimiter

    stub = ScriptStub([["run", 0], ["rate", 4200]])
    now = [100.0]
    lim = TypeLimiter(stub, "p", RedisGate(threading.Event()), monotonic=lambda: now[0])  # type: ignore[arg-type]
    limits = app.handlers["limited"].limits
    assert limits is not None and limits.rate is not None
    granted = lim.admit_now("limited", limits, "wf/limited/1", 1)
    slack_s = start_slack_ms(limits.rate.per_ms) / 1000  # 3 s for 10/min
    assert granted.start == f"g:{granted.lease}" and granted.call_by == 100.0 + slack_s / 2
    assert stub.calls[0][0] == 1 and stub.calls[0][9] == ""  # max_concurrent; nothing lapsed
    task = ActivityTask("run#1/step", "limited", "step", "{}", 1, 1, "wf/limited/1")
    again = lim.readmit_now("limited", limits, task, granted)
    # the lapsed start leaves the books; the rate alone is asked; the lease is kept
    assert stub.calls[1][9] == granted.start and stub.calls[1][0] == 0
    assert again.wait_ms == 4200 and again.lease == granted.lease
    assert again.lease_key == granted.lease_key
    lim.gate.stop.set()
