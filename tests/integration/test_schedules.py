"""Durable schedules on the real broker (docs/schedules.md): every 2 s for 30 s with the
orchestrator SIGKILLed twice, one run per tick by id, no tick handled twice, and the ticks
of the downtime fired late or recorded missed as each schedule's catch-up window says; and
with runs longer than the interval, skip and buffer_one never let two runs overlap."""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import ActivityCompleted, WorkflowCompleted, WorkflowStarted
from tests.integration.schedules_app import APP
from tests.integration.schedules_app import app as schedules_app
from tests.support import histories, wait_until

PERIOD_S = 2


def _assigned(proc) -> bool:
    return "assigned partitions" in proc.log_path.read_text()


def _tick_s(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def _caught_up(client: KeelClient, name: str) -> bool:
    """Whether the schedule has handled a tick of the last few seconds."""
    recent = client.schedules.show(name).recent
    return bool(recent) and time.time() - _tick_s(recent[-1]["tick"]) <= 3 * PERIOD_S


def _handled(events) -> list[dict]:
    """Every tick record of a schedule's history, in the order they were recorded."""
    out = []
    for e in events:
        if isinstance(e.payload, ActivityCompleted) and "/tick" in e.payload.activity_id:
            out.extend(json.loads(e.payload.result_json)["handled"])
    return out


def test_a_schedule_every_2s_through_two_orchestrator_sigkills(settings, services):
    env = {"KEEL_INSTANCE_ID": "sched-orch"}
    orch = services.start("orchestrator", "--app", APP, **env)
    services.start("worker", "--app", APP)
    wait_until(lambda: _assigned(orch), 60, "the orchestrator's assignment")
    client = KeelClient(settings, schedules_app)
    try:
        client.schedules.create(
            "catchup", "stamp", {"note": "c"}, every="2s", catchup_window_s=300, overlap="allow_all"
        )
        client.schedules.create("strict", "stamp", {"note": "s"}, every="2s", catchup_window_s=1)
        began = time.monotonic()
        for _ in range(2):
            time.sleep(7)
            services.kill(orch)  # SIGKILL
            time.sleep(5)  # at least two ticks fall in the downtime
            orch = services.start("orchestrator", "--app", APP, **env)
        time.sleep(max(0.0, 30 - (time.monotonic() - began)))
        for name in ("catchup", "strict"):  # a delete ends a schedule before its due ticks
            wait_until(lambda n=name: _caught_up(client, n), 120, f"{name} to catch up")
        shown = client.schedules.show("catchup")
        assert shown.state == "active" and shown.next_fires
        assert [i.name for i in client.schedules.list()] == ["catchup", "strict"]
        for name in ("catchup", "strict"):
            client.schedules.delete(name)
        wait_until(
            lambda: all(
                client.projection.status(f"schedule:{n}") == "completed"
                for n in ("catchup", "strict")
            ),
            60,
            "both schedules deleted",
        )
        assert client.schedules.list() == []
        assert client.schedules.show("strict").state == "deleted"
    finally:
        client.close()

    by_wf = histories(settings)
    starts = {
        wf: [e for e in ev if isinstance(e.payload, WorkflowStarted)] for wf, ev in by_wf.items()
    }
    for name in ("catchup", "strict"):
        handled = _handled(by_wf[f"schedule:{name}"])
        ticks = [_tick_s(h["tick"]) for h in handled]
        assert len(ticks) == len(set(ticks)), f"{name}: a tick handled twice"
        assert ticks == sorted(ticks)
        assert ticks == list(range(ticks[0], ticks[-1] + 1, PERIOD_S)), f"{name}: a tick lost"
        assert len(ticks) >= 12, f"{name}: {len(ticks)} ticks in ~30 s"
        # joined: a tick whose attempt failed after starting its run (a start waits for the
        # read model, and an orchestrator slow to come back fails that wait), retried
        fired = {h["workflow_id"] for h in handled if h["outcome"] in ("started", "joined")}
        runs = {wf for wf in by_wf if wf.startswith(f"{name}:")}
        assert runs == fired, f"{name}: one run per fired tick, by id"
        assert all(len(starts[wf]) == 1 for wf in runs)
        assert fired == {
            f"{name}:{h['tick']}" for h in handled if h["outcome"] in ("started", "joined")
        }
        outcomes = {h["outcome"] for h in handled}
        if name == "catchup":  # every tick of the downtimes fired late
            assert outcomes <= {"started", "joined"}
        else:  # the downtimes' ticks were missed, each recorded, none started
            assert outcomes <= {"started", "joined", "missed"}
            missed = [h for h in handled if h["outcome"] == "missed"]
            assert len(missed) >= 2
            assert not any(f"{name}:{h['tick']}" in by_wf for h in missed)


def test_skip_and_buffer_one_never_let_two_runs_of_a_schedule_overlap(settings, services):
    orch = services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    wait_until(lambda: _assigned(orch), 60, "the orchestrator's assignment")
    client = KeelClient(settings, schedules_app)
    policies = ("skip", "buffer_one")
    try:
        for policy in policies:
            client.schedules.create(policy, "slow_stamp", {}, every="1s", overlap=policy)
        time.sleep(12)
        for policy in policies:
            client.schedules.delete(policy)
        wait_until(
            lambda: all(client.projection.status(f"schedule:{p}") == "completed" for p in policies),
            60,
            "both schedules deleted",
        )
        runs = [wf for wf in client.projection.list(limit=10_000) if ":" in wf["workflow_id"]]
        for row in runs:
            if not row["workflow_id"].startswith("schedule:"):
                client.wait(row["workflow_id"], 30)
    finally:
        client.close()

    by_wf = histories(settings)
    for policy in policies:
        handled = _handled(by_wf[f"schedule:{policy}"])
        outcomes = [h["outcome"] for h in handled]
        runs = sorted(wf for wf in by_wf if wf.startswith(f"{policy}:"))
        assert len(runs) >= 3, (policy, outcomes)
        spans = []
        for wf in runs:  # in tick order: each ran from its start to its end
            events = by_wf[wf]
            (start,) = [e for e in events if isinstance(e.payload, WorkflowStarted)]
            (end,) = [e for e in events if isinstance(e.payload, WorkflowCompleted)]
            spans.append((start.recorded_at, end.recorded_at))
        for (_, ended), (began, _) in itertools.pairwise(spans):
            assert began >= ended, f"{policy}: a run began before the previous one ended"
        assert "skipped_overlap" in outcomes
        started = {h["workflow_id"] for h in handled if h["outcome"] in ("started", "joined")}
        assert started == set(runs)
        if policy == "buffer_one":  # each buffered tick started once its previous run ended
            buffered = [h["tick"] for h in handled if h["outcome"] == "buffered"]
            assert buffered
            assert {f"{policy}:{t}" for t in buffered[:-1]} <= started
        else:
            assert "buffered" not in outcomes
