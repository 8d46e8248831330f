"""docs/tutorial.md on the real Kafka and Redis, as a user runs it in the shop's folder: its
``keel_stack`` test (``tests/test_on_kafka.py``), and ``keel evaluate`` of the shop under
every fault class that can strike it, its driver answering the manager and Stripe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.unit.test_tutorial import ROOT, copy_of_project, run_pytest


def test_the_tutorials_real_stack_test_passes(servers, tmp_path: Path) -> None:
    env = {"KEEL_BOOTSTRAP_SERVERS": servers.bootstrap_servers, "KEEL_REDIS_URL": servers.redis_url}
    out = run_pytest(copy_of_project(tmp_path), "tests/test_on_kafka.py", env=env)
    assert re.search(r"\b1 passed\b", out), out[-2000:]


def test_the_shop_is_evaluated_under_every_fault_class(servers, tmp_path: Path) -> None:
    project = copy_of_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        PYTHONPATH=str(ROOT),
        KEEL_BOOTSTRAP_SERVERS=servers.bootstrap_servers,
        KEEL_REDIS_URL=servers.redis_url,
        KEEL_HOME=str(tmp_path / "home"),
        KEEL_PARTITIONS="4",
        COLUMNS="200",
    )
    args = ["evaluate", "--app", "shop:app", "--workflow", "order_fulfilment"]
    args += ["--inputs", "orders.jsonl", "--driver", "shop.evaluation:driver", "--runs", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args, "--out", "evaluation"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    report = json.loads((project / "evaluation" / "report.json").read_text())
    classes = {c["fault"]: c for c in report["classes"]}
    assert report["verdict"] == "pass"
    every = {"none", "crash", "duplicate_callbacks", "response_loss", "queue_full", "old_schema"}
    assert set(classes) == every | {"compensation_failure"}
    # two orders complete, the one the courier cannot take is undone, the one above
    # 2,000.00 is rejected; with every compensation failing, the undone one says so
    expected = {"completed": 2, "compensated": 1, "failed": 1}
    for fault, c in classes.items():
        if fault == "compensation_failure":
            assert c["outcomes"] == {"completed": 2, "compensation_failed": 1, "failed": 1}, c
        else:
            assert c["outcomes"] == expected, c
        assert (c["history_violations"], c["duplicate_effects"]) == (0, 0), c
        assert c["driver_refusals"] == [], c
