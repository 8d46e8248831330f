"""A process without the run's version, on the real broker: parked, then finished.

Runs of ``gated`` v2 wait, started by a process holding v1 and v2; that process dies
(no checkpoint: the next one rebuilds from the events alone); a process holding only v1
takes over and receives commands for the v2 runs. The runs show ``needs_attention`` with
the reason, their commands are kept as ``parked:`` dead letters, nothing is quarantined
and the process keeps running; a v1 run on the same process finishes. Then a process
holding v2 starts: it redrives the parked commands by itself and the runs finish on v2's
path, each with exactly one parking recorded.
"""

from __future__ import annotations

import json

from orchestrator.client.client import KeelClient
from orchestrator.client.dead_letters import DeadLetters, LetterState
from tests.integration import versions_app
from tests.support import histories, wait_until

APP_V1 = "tests.integration.versions_app:app_v1"
APP = "tests.integration.versions_app:app"
RUNS = 4


def _status(client: KeelClient, wf: str) -> str:
    return str((client.projection.get(wf) or {}).get("status", ""))


def _parked(settings) -> list:
    return [x for x in DeadLetters(settings).letters() if x.reason.startswith("parked: ")]


def test_a_process_without_the_version_parks_runs_and_a_process_with_it_finishes_them(
    settings, services
) -> None:
    services.start("worker", "--app", APP)
    both = services.start("orchestrator", "--app", APP)
    client = KeelClient(settings, versions_app.app)
    v2 = [f"gated-v2-{i}" for i in range(RUNS)]
    for i, wf in enumerate(v2):
        client.start("gated", {"order": i}, wf, version=2)
    client.start("gated", {"order": 99}, "gated-v1", version=1)
    wait_until(
        lambda: [_status(client, w) for w in [*v2, "gated-v1"]] == ["waiting"] * (RUNS + 1),
        90,
        "the runs waiting",
    )
    services.kill(both, sig=9)  # gone without a checkpoint

    old = services.start("orchestrator", "--app", APP_V1)
    for wf in [*v2, "gated-v1"]:
        client.signal(wf, "go", {})
    assert client.wait("gated-v1", 90).status == "completed"
    wait_until(
        lambda: [_status(client, w) for w in v2] == ["needs_attention"] * RUNS,
        90,
        "the v2 runs parked",
    )
    digest = versions_app.GATED_V2.digest[:12]
    for wf in v2:
        shown = client.show(wf)
        assert shown.attention_reason == (
            f"version missing: workflow '{wf}' runs 'gated' v2 (digest {digest}), which this "
            "process does not have; deploy it, then `keel dlq redrive` the run's parked "
            "commands"
        )
    wait_until(lambda: len(_parked(settings)) == RUNS, 60, "one parked letter per v2 run")
    assert {x.workflow_id for x in _parked(settings)} == set(v2)
    assert old.poll() is None, "the v1-only process must keep running"
    held = old.log_path.read_text()
    assert "runs a version this process lacks: held" in held
    assert "quarantined workflow" not in held
    services.kill(old, sig=15)  # a clean stop: its checkpoint must not hide the v2 history

    services.start("orchestrator", "--app", APP)  # the version is deployed
    for wf in v2:
        assert client.wait(wf, 120).status == "completed", wf
    by_wf = histories(settings)
    for wf in v2:
        types = [e.type for e in by_wf[wf]]
        assert types.count("WorkflowNeedsAttention") == 1, types
        assert json.loads(by_wf[wf][-1].payload.output_json)["path"] == "v2"
    wait_until(
        lambda: all(x.state == LetterState.REDRIVEN for x in _parked(settings)),
        30,
        "the parked letters marked redriven",
    )
    client.close()
