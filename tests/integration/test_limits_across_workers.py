"""Per-type limits across two worker processes (issue 33, docs/limits.md "Per-type limits").

A fake service records when each call arrives and how many run at once: a rate limit of
10/min lets it see at most 10 calls in any 60 s window, ``max_concurrent=2`` at most two
at once; every run completes although its step allows one attempt (a throttled attempt
spends no retry), and the throttled attempts are in history. The histories pass the
invariant checker when the test ends (the ``settings`` fixture).
"""

from __future__ import annotations

import time

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import ActivityFailed
from tests.integration import limits_app
from tests.integration.limits_app import APP
from tests.limits_fake import fake as fake
from tests.support import Services, histories, wait_until


def _run_all(settings, tmp_path, fake, workflow: str, items: list[dict]) -> dict[str, list]:
    svc = Services(settings, tmp_path, KEEL_LIMITS_FAKE_URL=fake.url)
    client = KeelClient(settings, limits_app.app)
    try:
        svc.start("orchestrator", "--app", APP)
        svc.start("worker", "--app", APP)
        svc.start("worker", "--app", APP)
        ids = [client.start(workflow, item).workflow_id for item in items]
        for wf in ids:
            assert client.wait(wf, 240).status == "completed", wf
    finally:
        svc.stop_all()
    return {wf: events for wf, events in histories(settings).items() if wf in ids}


def _throttled(runs: dict[str, list]) -> list[ActivityFailed]:
    failed = [
        e.payload for evs in runs.values() for e in evs if isinstance(e.payload, ActivityFailed)
    ]
    assert {f.failure_class for f in failed} <= {"throttled"}, failed
    return failed


def test_ten_a_minute_across_two_workers_never_exceeds_ten_in_any_minute(settings, tmp_path, fake):
    items = [{"n": n} for n in range(14)]
    started = time.monotonic()
    runs = _run_all(settings, tmp_path, fake, "rate_limited", items)
    assert sorted(n for _, n in fake.calls) == list(range(14))  # every item, once
    first = min(t for t, _ in fake.calls)
    arrivals = sorted(round(t - first, 3) for t, _ in fake.calls)
    assert fake.most_in_any_window(60.0) <= 10, arrivals
    assert time.monotonic() - started >= 60
    assert len(_throttled(runs)) >= 4


def test_two_at_a_time_across_two_workers(settings, tmp_path, fake):
    items = [{"n": n, "hold_ms": 1500} for n in range(10)]
    runs = _run_all(settings, tmp_path, fake, "concurrency_limited", items)
    assert sorted(n for _, n in fake.calls) == list(range(10))
    assert fake.peak == 2
    assert _throttled(runs)
    wait_until(lambda: fake.running == 0, 5, "the fake to be idle")
