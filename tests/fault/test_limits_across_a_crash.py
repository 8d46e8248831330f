"""A rate limit holds when attempts from before an orchestrator SIGKILL meet those after it.

Issue 47 item 5 (docs/limits.md "Per-type limits"): a burst of 40 runs of an activity
under ``RateLimit(10, per=5)``; the orchestrator is SIGKILLed in the middle of it and
restarted under the same instance id (it takes the partitions over at once, fencing its
predecessor's open transaction; a fresh id would wait out the static member's session,
~25 s), so attempts dispatched before the kill meet the throttled attempts dispatched
again after it, as an outside check saw. The fake service's own books must show
at most 10 calls in any 5 s, each item called once, and every run completed; the
histories pass the invariant checker (``cluster_settings``).
"""

from __future__ import annotations

import time

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import ActivityFailed
from tests.integration import limits_app
from tests.integration.limits_app import APP
from tests.limits_fake import fake as fake
from tests.support import Services, histories, wait_until

RUNS = 40


def _assigned(proc) -> bool:
    return "assigned partitions" in proc.log_path.read_text()


def test_a_burst_under_ten_per_5s_through_an_orchestrator_sigkill(cluster_settings, tmp_path, fake):
    svc = Services(cluster_settings, tmp_path, KEEL_LIMITS_FAKE_URL=fake.url)
    client = KeelClient(cluster_settings, limits_app.app)
    try:
        orch = svc.start("orchestrator", "--app", APP, KEEL_INSTANCE_ID="limits-crash")
        svc.start("worker", "--app", APP)
        svc.start("worker", "--app", APP)
        wait_until(lambda: _assigned(orch), 60, "the orchestrator's assignment")
        ids = [client.start("burst_limited", {"n": n}).workflow_id for n in range(RUNS)]
        # mid-burst: the first ten called, the rest throttled with reserved starts
        wait_until(lambda: len(fake.calls) >= 12, 60, "the burst under way")
        svc.kill(orch)
        killed_at = time.time()
        svc.start("orchestrator", "--app", APP, KEEL_INSTANCE_ID="limits-crash")
        deadline = time.monotonic() + 60
        for wf in ids:
            left = max(1.0, deadline - time.monotonic())
            assert client.wait(wf, left).status == "completed", wf
    finally:
        svc.stop_all()
        client.close()
    first = min(t for t, _ in fake.calls)
    arrivals = sorted(round(t - first, 3) for t, _ in fake.calls)
    assert fake.repeated() == {}
    assert sorted(n for _, n in fake.calls) == list(range(RUNS))
    assert sum(1 for t, _ in fake.calls if t > killed_at) >= 10, arrivals
    assert fake.most_in_any_window(5.0) <= 10, arrivals

    runs = histories(cluster_settings)
    throttled = [
        e.payload
        for wf in ids
        for e in runs[wf]
        if isinstance(e.payload, ActivityFailed) and e.payload.failure_class == "throttled"
    ]
    assert len(throttled) >= RUNS - 10
    lapsed = sum(p.log_path.read_text().count("lapsed before its call") for p in svc.procs)
    print(f"arrivals (s): {arrivals}; starts admitted again after lapsing: {lapsed}")
