"""``keel orchestrator``'s projector child (its default): the read model written by a child
process fed through a pipe, restarted when it dies, and never outliving its orchestrator;
``--projector-in thread`` keeps it in process."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil

from orchestrator.client.client import KeelClient
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.runtime.health import status_path
from tests.integration import local_app
from tests.support import Services, assert_sound_history, histories, wait_until

APP = "tests.integration.local_app:app"


def _children(pid: int) -> list[psutil.Process]:
    """The orchestrator's live projector children (``keel projector --feed-fd``)."""
    found = []
    for child in psutil.Process(pid).children():
        try:
            if "--feed-fd" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:  # ended (a zombie not reaped yet) between the two calls
            continue
    return found


def _supervised(status: Path) -> dict:
    """The projector child's entry in the orchestrator's status file (``{}`` before it)."""
    try:
        return json.loads(status.read_text())["supervised"]["projector"]
    except (OSError, ValueError, KeyError):
        return {}


def _health(settings) -> list[dict]:
    r = redis_client(settings.redis, RedisUse.READ_MODEL)
    keys = r.keys(f"{Keyspace(settings.topic_prefix).read_model}health:projector:*")
    return [json.loads(r.get(k) or "{}") for k in keys]


def test_the_child_writes_the_read_model_from_the_pipe_and_is_restarted(settings, tmp_path):
    svc = Services(settings, tmp_path)
    client = KeelClient(settings, local_app.app)
    try:
        home = tmp_path / "home"
        orch = svc.start(
            "orchestrator",
            "--app",
            APP,
            KEEL_HOME=str(home),
            KEEL_INSTANCE_ID="pc",
            KEEL_STATUS_INTERVAL_S="0.3",
        )
        first = wait_until(lambda: _children(orch.pid), 30, "the projector child")[0]
        status = status_path(home, "orchestrator", "pc")
        wait_until(lambda: _supervised(status).get("pid") == first.pid, 20, "the child's pid")
        for i in range(5):
            client.start("three_step_local", {"n": i}, f"wf-{i}")
        for i in range(5):  # the parent runs no projector: the child wrote these rows
            row = client.wait(f"wf-{i}", 60)
            assert row.status == "completed", row
            assert row.output == {"n": ((i + 1) * 2) ** 2}
        # The child took events from the pipe: only its pipe feeds its channel. (Not
        # necessarily all 45: those committed before its group member was assigned the
        # partitions are read from the topic, and its health is published every 5 s.)
        wait_until(
            lambda: [h for h in _health(settings) if h.get("applied_in_process", 0) > 0],
            20,
            "the child's health with events taken from the pipe",
        )
        os.kill(first.pid, signal.SIGKILL)  # the child dies: another one is started
        second = wait_until(
            lambda: [c for c in _children(orch.pid) if c.pid != first.pid], 60, "a new child"
        )[0]
        client.start("three_step_local", {"n": 7}, "wf-after")
        assert client.wait("wf-after", 60).status == "completed"
        seen = wait_until(
            lambda: (h := _supervised(status)).get("pid") == second.pid and h, 20, "its pid"
        )
        assert seen["children_started"] == 2 and seen["restarts"] == 1, seen
        assert seen["published"] >= 45 and seen["name"] == "projector", seen
        svc.kill(orch)  # SIGKILL: the pipe closes, and the child ends with it
        wait_until(lambda: not second.is_running() or second.status() == "zombie", 20,
                   "the child to end with its orchestrator")  # fmt: skip
    finally:
        client.close()
        svc.stop_all()
    for wf, events in histories(settings).items():
        assert_sound_history(wf, events)


def test_a_stopped_orchestrator_stops_its_child_first(settings, tmp_path):
    svc = Services(settings, tmp_path)
    try:
        orch = svc.start("orchestrator", "--app", APP)
        child = wait_until(lambda: _children(orch.pid), 30, "the projector child")[0]
        orch.send_signal(signal.SIGTERM)
        assert orch.wait(timeout=40) == 0, orch.log_path.read_text()[-2000:]
        assert not child.is_running()
    finally:
        svc.stop_all()


def _completed(settings, wf: str) -> bool:
    from orchestrator.domain.model.messages import TERMINAL_EVENTS

    return any(isinstance(e.payload, TERMINAL_EVENTS) for e in histories(settings).get(wf, []))


def test_a_thread_projector_or_none_starts_no_child(settings, tmp_path):
    svc = Services(settings, tmp_path)
    client = KeelClient(settings, local_app.app)
    try:
        for wf, args in (
            ("wf-thread", ["--projector-in", "thread"]),
            ("wf-none", ["--no-projector"]),
        ):
            orch = svc.start("orchestrator", "--app", APP, *args)
            client.start("three_step_local", {"n": 1}, wf, confirm_timeout_s=None)
            wait_until(lambda wf=wf: _completed(settings, wf), 60, f"{wf} to complete")
            if wf == "wf-thread":  # the thread writes the row
                assert client.wait(wf, 60).status == "completed"
            assert _children(orch.pid) == []  # running and deciding, with no child
            svc.kill(orch)
        assert client.projection.get("wf-none") is None  # no projector wrote it
    finally:
        client.close()
        svc.stop_all()


def test_no_projector_and_a_projector_placement_exclude_each_other(settings, tmp_path):
    svc = Services(settings, tmp_path)
    orch = svc.start("orchestrator", "--app", APP, "--no-projector", "--projector-in", "child")
    assert orch.wait(timeout=60) == 2
    assert "--projector-in and --no-projector exclude each other" in orch.log_path.read_text()


def test_the_child_holds_a_remote_runs_middle_transactions_and_loses_none(settings, tmp_path):
    """Remote steps: each run's two middle transactions change no status, so the child
    holds them (``row_hold.py``) and writes them with the run's end; the rows and their
    histories are those of ``keel.events``."""
    svc = Services(settings, tmp_path)
    client = KeelClient(settings, local_app.app)
    ids = [f"held-{i}" for i in range(6)]
    try:
        svc.start("orchestrator", "--app", APP)
        svc.start("worker", "--app", APP)
        for i, wf in enumerate(ids):
            client.start("three_step", {"n": i}, wf)
        for i, wf in enumerate(ids):
            row = client.wait(wf, 60)
            assert row.status == "completed", row
            assert row.output == {"n": ((i + 1) * 2) ** 2}
        # (The first runs may reach the child by the topic, before its group member is
        # assigned; its health is published every 5 s.)
        wait_until(
            lambda: [
                h
                for h in _health(settings)
                if h.get("row_holds", 0) > 0 and h.get("rows_held") == 0  # all written
            ],
            20,
            "the child's health with rows held, then written",
        )
        events = histories(settings)
        for wf in ids:
            assert_sound_history(wf, events[wf])
            written = [h["seq"] for h in client.projection.history(wf)]
            assert written == [e.seq for e in events[wf]], wf
    finally:
        client.close()
        svc.stop_all()
