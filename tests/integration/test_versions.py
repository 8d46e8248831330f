"""Pinned versions: runs keep the version they started on across a deploy of v2.

100 runs start on v1 and wait; v2 is deployed mid-way (the orchestrator is restarted with
code holding v1 and v2); the waiting runs finish on v1's path, new starts take v2 (or v1
when named). A process without a run's version: tests/integration/test_parking.py. Then the
whole topic replays identically with the new code (``keel replay-check --from-topic``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from orchestrator.client.client import KeelClient
from tests.integration import versions_app
from tests.support import histories, wait_until

APP_V1 = "tests.integration.versions_app:app_v1"
APP = "tests.integration.versions_app:app"
OLD, NEW = 100, 20


def _statuses(client: KeelClient, ids: list[str]) -> list[str]:
    return [(client.projection.get(w) or {}).get("status", "") for w in ids]


def test_runs_keep_their_version_across_a_deploy(settings, services) -> None:
    services.start("worker", "--app", APP)
    before = services.start("orchestrator", "--app", APP_V1)
    old_client = KeelClient(settings, versions_app.app_v1)
    old = [f"old-{i}" for i in range(OLD)]
    for i, wf in enumerate(old):
        old_client.start("pinned", {"order": i}, wf)
    wait_until(lambda: _statuses(old_client, old) == ["waiting"] * OLD, 120, "v1 runs waiting")
    old_client.close()

    services.kill(before, sig=15)  # deploy: the new code holds v1 and v2
    services.start("orchestrator", "--app", APP)
    client = KeelClient(settings, versions_app.app)
    new = [f"new-{i}" for i in range(NEW)]
    for i, wf in enumerate(new):
        client.start("pinned", {"order": 100 + i}, wf)
    named = client.start("pinned", {"order": 200}, "named-v1", version=1).workflow_id
    wait_until(lambda: _statuses(client, [named]) == ["waiting"], 90, "the named v1 run waiting")
    for wf in [*old, named]:
        client.signal(wf, "go", {})
    for wf in [*old, *new, named]:
        assert client.wait(wf, 90).status == "completed", wf

    by_wf = histories(settings)
    for wf in [*old, named]:
        started = by_wf[wf][0].payload
        assert (started.version, started.definition_digest) == (1, versions_app.V1.digest)
        assert [e.type for e in by_wf[wf]][-3:] == [
            "ActivityScheduled",
            "ActivityCompleted",
            "WorkflowCompleted",
        ]
        out = json.loads(by_wf[wf][-1].payload.output_json)
        assert out["path"] == "v1", (wf, out)
        assert client.show(wf).version == 1
    for wf in new:
        started = by_wf[wf][0].payload
        assert (started.version, started.definition_digest) == (2, versions_app.V2.digest)
        assert json.loads(by_wf[wf][-1].payload.output_json)["path"] == "v2"
        assert not any(e.type == "SignalReceived" for e in by_wf[wf])
    client.close()

    env = {**services.env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "replay-check",
            "--app",
            APP,
            "--from-topic",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert report["runs"] == OLD + NEW + 1 and report["diverged"] == 0
    # the commands were still in keel.commands: every group was decided again
    assert all(r["folded_only"] == 0 and r["clock_inferred"] == 0 for r in report["reports"])
