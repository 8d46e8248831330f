"""Sync local steps of one round run one after another on one runner thread.

Each is bounded from its own start: one that overruns is given up (reported as a
``StartToCloseTimeout`` when no timer will fail it), and the rest of the round runs on
a fresh runner, so one stuck handler neither stops the round nor the next one.
"""

from __future__ import annotations

import threading
from typing import Any

from orchestrator.application.app import KeelApp
from orchestrator.domain.model.messages import ActivityScheduled, CompleteActivity, FailActivity
from orchestrator.engine.local_activities import LocalActivities, LocalRun

app = KeelApp("keel-local-runner-tests")
release = threading.Event()
ran: list[str] = []


@app.activity("quick")
def quick(inp: dict[str, Any]) -> dict[str, Any]:
    ran.append(f"quick-{inp['n']}-{threading.current_thread().name}")
    return {"n": int(inp["n"]) + 1}


@app.activity("stuck")
def stuck(inp: dict[str, Any]) -> dict[str, Any]:
    release.wait(10)
    ran.append("stuck-done")
    return {"n": 0}


@app.activity("broken")
def broken(inp: dict[str, Any]) -> dict[str, Any]:
    raise ValueError("no such account")


def _run(activity: str, n: int, bound_ms: int = 2000, timer: bool = False) -> LocalRun:
    s = ActivityScheduled(f"a{n}", activity, "step", f'{{"n": {n}}}', 1, 1, f"k{n}")
    return LocalRun(0, f"wf-{n}", "run", f"ev{n}", None, s, bound_ms, timer)


def test_a_stuck_sync_step_is_given_up_and_the_rest_of_the_round_still_runs():
    ran.clear()
    release.clear()
    local = LocalActivities(app, redis_url=None, topic_prefix="t", stop=threading.Event())
    try:
        out = local.run(
            [_run("quick", 1), _run("stuck", 2, bound_ms=200), _run("quick", 3), _run("broken", 4)]
        )
        assert out[0] == CompleteActivity("a1", 1, '{"n": 2}')
        assert isinstance(out[1], FailActivity)
        assert (out[1].failure_class, out[1].error_type) == ("transient", "StartToCloseTimeout")
        assert out[2] == CompleteActivity("a3", 1, '{"n": 4}')
        assert isinstance(out[3], FailActivity) and out[3].message == "no such account"
        assert local.overruns == 1
        assert "stuck-done" not in ran  # given up while it still ran
        # with a start-to-close timer, an overrun reports nothing: the timer fails it
        assert local.run([_run("stuck", 5, bound_ms=100, timer=True)]) == [None]
        assert local.run([_run("quick", 6)]) == [CompleteActivity("a6", 1, '{"n": 7}')]
    finally:
        release.set()
        local.close()
    threads = {line.rsplit("-", 1)[-1] for line in ran if line.startswith("quick")}
    assert threads == {"activities"}  # keel-local-activities: never the caller's thread
