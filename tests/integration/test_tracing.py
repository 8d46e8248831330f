"""One trace follows a workflow from `keel workflow start` through every process to the end."""

from __future__ import annotations

import json

from tests.integration.test_durable_core import keel
from tests.support import wait_until


def test_trace_context_travels_in_kafka_headers_across_processes(settings, tmp_path):
    from tests.support import Services

    trace_file = tmp_path / "spans.jsonl"
    services = Services(settings, tmp_path, KEEL_TRACE_FILE=str(trace_file))
    try:
        services.start("orchestrator")
        services.start("worker")
        started = keel(
            settings, "workflow", "start", "three_step", "--input", '{"n": 2}',
            "--id", "traced", "--wait", "--json", KEEL_TRACE_FILE=str(trace_file),
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["output"] == {"n": 36}

        def spans() -> list[dict]:
            if not trace_file.exists():
                return []
            rows = [json.loads(line) for line in trace_file.read_text().splitlines() if line]
            return [s for s in rows if s["attributes"].get("keel.workflow_id") == "traced"
                    or s["name"].startswith("keel.client")]  # fmt: skip

        wait_until(
            lambda: sum(s["name"].startswith("keel.command") for s in spans()) >= 4, 30, "spans"
        )
    finally:
        services.stop_all()
    found = spans()
    names = sorted(s["name"] for s in found)
    assert names == sorted(
        [
            "keel.client StartWorkflow",
            "keel.command StartWorkflow",
            "keel.activity add_one",
            "keel.command CompleteActivity",
            "keel.activity double",
            "keel.command CompleteActivity",
            "keel.activity square",
            "keel.command CompleteActivity",
        ]
    )
    assert len({s["trace_id"] for s in found}) == 1, "every span belongs to one trace"
    by_id = {s["span_id"]: s for s in found}
    for s in found:
        if s["name"] != "keel.client StartWorkflow":
            assert s["parent_id"] in by_id, f"{s['name']} has no parent in the trace"
    services_seen = {s["service"] for s in found}
    assert services_seen == {"keel-cli", "keel-orchestrator", "keel-worker"}
