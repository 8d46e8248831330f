"""``keel infra status`` reads each service's status file and tells live trouble from the gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from orchestrator.runtime.health import STALE_AFTER_S, service_health

NOW = 1_800_000_000.0


def _write(home, name: str, **fields) -> None:
    (home / "status").mkdir(exist_ok=True)
    data = {"state": "running", "pid": os.getpid(), "updated_at": NOW, "threads": {}, **fields}
    (home / "status" / f"{name}.json").write_text(json.dumps(data))


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_each_service_gets_a_verdict(tmp_path) -> None:
    _write(tmp_path, "orchestrator-fresh", threads={"projector": True})
    _write(tmp_path, "orchestrator-hangs", updated_at=NOW - STALE_AFTER_S - 5)
    _write(tmp_path, "orchestrator-lost-thread", threads={"projector": False})
    _write(tmp_path, "orchestrator-recovering", state="recovering")
    child = {"state": "backoff", "restarts": 3, "last_error": "RuntimeError: exited with 1"}
    _write(tmp_path, "orchestrator-child-fails", supervised={"projector": child})
    _write(tmp_path, "orchestrator-child-runs", supervised={"projector": {"state": "running"}})
    _write(tmp_path, "orchestrator-killed", pid=_gone_pid(), updated_at=NOW - 3600)
    _write(tmp_path, "orchestrator-stopped", state="stopped", updated_at=NOW - 3600)
    (tmp_path / "status" / "torn.json").write_text("{not json")

    rows = {r["file"]: r for r in service_health(tmp_path, now=NOW)}

    assert set(rows) == {
        "orchestrator-fresh",
        "orchestrator-hangs",
        "orchestrator-lost-thread",
        "orchestrator-recovering",
        "orchestrator-child-fails",
        "orchestrator-child-runs",
        "orchestrator-killed",
        "orchestrator-stopped",
    }
    assert rows["orchestrator-fresh"]["problems"] == []
    assert rows["orchestrator-hangs"]["problems"] == [f"no update for {STALE_AFTER_S + 5:.0f}s"]
    assert rows["orchestrator-lost-thread"]["problems"] == ["dead threads: projector"]
    assert rows["orchestrator-recovering"]["problems"] == ["state recovering"]
    assert rows["orchestrator-child-fails"]["problems"] == [
        "restarting after a failure: projector (3 restarts; RuntimeError: exited with 1)"
    ]
    assert rows["orchestrator-child-runs"]["problems"] == []
    for gone in ("orchestrator-killed", "orchestrator-stopped"):
        assert rows[gone]["gone"] and rows[gone]["problems"] == []


def test_no_status_directory_means_no_services(tmp_path) -> None:
    assert service_health(tmp_path) == []


def test_a_stalled_calls_replaced_helper_is_not_a_dead_thread(tmp_path) -> None:
    """After a Kafka call stalls, its helper thread is left to finish and a new one of the
    same name serves: the status file must not then report a dead thread (it did, beside
    ``stalled_calls``, in a broker-loss test)."""
    from orchestrator.io.kafka.broker_errors import BoundedCaller, CallStalled
    from orchestrator.runtime.health import StatusFile

    caller = BoundedCaller("keel-test-call", lambda: False, slice_s=0.01)
    release = threading.Event()
    status = StatusFile(tmp_path / "status" / "o.json", dict)
    lonely = threading.Thread(target=release.wait, name="keel-test-lonely", daemon=True)
    lonely.start()
    status.watched["keel-test-lonely"] = lonely
    try:
        with pytest.raises(CallStalled):
            caller.call("stuck", release.wait, 0.05)
        assert caller.abandoned == 1
    finally:
        release.set()
    first_helper = status.watched["keel-test-call"]
    first_helper.join(5)
    lonely.join(5)
    assert not first_helper.is_alive()
    assert caller.call("next", lambda: 7, 5.0) == 7  # the new helper serves
    assert status.threads()["keel-test-call"] is True
    assert status.threads()["keel-test-lonely"] is False
    caller.close()
