"""A broker that stops answering never hangs or kills the orchestrator.

The test starts its OWN single-node broker (ports of its own, stopped by PID) and
freezes it with SIGSTOP: every in-flight call then waits on a silent socket, the
closest local stand-in for a coordinator that disappears. Before: a transactional call
past its timeout was re-raised as fatal and the process exited, or it hung ignoring
SIGTERM. Now: retriable errors are retried, a stalled call is abandoned and the
producer recreated, and SIGTERM stops the process within seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

from ops.local import LocalStack, port_in_use
from tests.conftest import stack_settings
from tests.support import Services, assert_sound_history, histories, wait_until

#: The first port tried for the test's own broker (client port, controller port + 1);
#: below Linux's ephemeral range (32768-60999), so no client's outgoing connection can
#: hold it when the broker binds (47392 once could, and the broker failed to start).
KAFKA_PORT = 28392


def _free_port_pair(first: int) -> int:
    """The first port from ``first`` on such that it and the next one are both free."""
    for port in range(first, first + 200, 2):
        if not port_in_use(port) and not port_in_use(port + 1):
            return port
    raise AssertionError(f"no two free ports between {first} and {first + 200}")


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory):
    home = tmp_path_factory.mktemp("stall-stack")
    port = _free_port_pair(KAFKA_PORT)
    stack = LocalStack(stack_settings(home, port, 28399), with_redis=False)
    stack.up(timeout_s=180)
    try:
        yield stack
    finally:
        _signal_broker(stack, signal.SIGCONT)
        stack.down()


def _signal_broker(stack: LocalStack, sig: signal.Signals) -> None:
    for record in stack._records():
        if record.role != "redis" and record.node_id is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, sig)


@pytest.fixture
def stall_settings(own_broker, servers, topic_prefix, tmp_path):
    from orchestrator.config.settings import Settings
    from orchestrator.io.kafka.topics import create_topics

    s = Settings(
        bootstrap_servers=own_broker.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=topic_prefix,
        partitions=4,
        replication_factor=1,
        home=tmp_path / "home",
    )
    create_topics(s)
    return s


@pytest.fixture
def stall_services(stall_settings, tmp_path):
    svc = Services(stall_settings, tmp_path)
    try:
        yield svc
    finally:
        svc.stop_all()


@pytest.fixture
def stall_client(stall_settings):
    from orchestrator.client.client import KeelClient
    from orchestrator.examples import app

    c = KeelClient(stall_settings, app)
    yield c
    c.close()


def _assigned(proc) -> bool:
    return "assigned partitions" in proc.log_path.read_text()


def test_a_frozen_broker_is_survived_and_every_workflow_completes(
    own_broker, stall_settings, stall_services, stall_client
):
    orch = stall_services.start("orchestrator", KEEL_INSTANCE_ID="stally")
    worker = stall_services.start("worker")
    wait_until(lambda: _assigned(orch), 90, "the first assignment")
    n = 60
    stall_client.start_many("three_step", [(f"stall-{i}", {"n": i}) for i in range(n)])
    time.sleep(0.5)
    _signal_broker(own_broker, signal.SIGSTOP)
    try:
        time.sleep(25)  # past the transaction, session and request timeouts
    finally:
        _signal_broker(own_broker, signal.SIGCONT)
    assert orch.poll() is None, orch.log_path.read_text()[-3000:]
    if worker.poll() is not None:  # the worker's own resilience is tested elsewhere
        stall_services.start("worker")
    wait_until(
        lambda: stall_client.projection.counts().get("completed", 0) == n,
        240,
        f"{n} completed workflows",
    )
    assert orch.poll() is None, "the orchestrator must survive the stall"
    by_wf = histories(stall_settings, expect_events=9 * n)
    assert sorted(by_wf) == sorted(f"stall-{i}" for i in range(n))
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)


def test_sigterm_stops_the_orchestrator_while_the_broker_is_frozen(
    own_broker, stall_settings, stall_services, stall_client
):
    orch = stall_services.start("orchestrator", KEEL_INSTANCE_ID="termy")
    wait_until(lambda: _assigned(orch), 90, "the first assignment")
    stall_client.start_many("three_step", [(f"term-{i}", {"n": i}) for i in range(20)])
    time.sleep(0.3)
    _signal_broker(own_broker, signal.SIGSTOP)
    try:
        time.sleep(3)
        orch.send_signal(signal.SIGTERM)
        try:
            orch.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the orchestrator ignored SIGTERM while the broker was frozen")
    finally:
        _signal_broker(own_broker, signal.SIGCONT)
    assert orch.returncode == 0, orch.log_path.read_text()[-3000:]
