"""The connector under faults: Kafka down and back, and a SIGKILL between Kafka's ack and the answer.

Both assert on the event history (one SignalReceived per event) and on the commands topic.
The Kafka outage stops this test's OWN broker (started here, stopped by PID); the shared
broker is never touched.
"""

from __future__ import annotations

import shutil
import signal
import threading

import pytest

from connectors.webhooks import message_id
from ops.local import LocalStack, port_in_use
from orchestrator.client.client import KeelClient
from orchestrator.config.settings import Settings
from orchestrator.examples import app as examples
from orchestrator.io.kafka.topics import create_topics
from tests.conftest import KEEL_DIR
from tests.integration import test_connector as hook
from tests.support import Services, wait_until


def _free_port_pair() -> int:
    """A port p with p and p+1 free (a broker's client and controller ports)."""
    for _ in range(50):
        port = hook.free_port()
        if port < 65000 and not port_in_use(port + 1):
            return port
    raise AssertionError("no two adjacent free ports")


@pytest.fixture
def own_broker(servers, tmp_path):
    """A one-node KRaft broker for this test alone, on free ports, stopped by PID."""
    home = tmp_path / "stack"
    stack = LocalStack(
        Settings(
            home=home,
            kafka_port=_free_port_pair(),
            redis_port=hook.free_port(),
            kafka_libs=KEEL_DIR / "kafka-libs",
            kafka_heap="512m",
            bootstrap_servers="",
            redis_url="",
        ),
        with_redis=False,
    )
    stack.up(timeout_s=180)
    try:
        yield stack
    finally:
        stack.down()
        shutil.rmtree(home, ignore_errors=True)


def test_kafka_down_is_a_503_and_the_retry_after_it_is_back_applies_once(
    servers, topic_prefix, own_broker, tmp_path
):
    settings = Settings(
        bootstrap_servers=own_broker.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=topic_prefix,
        partitions=2,
        replication_factor=1,
    )
    create_topics(settings)
    services = Services(settings, tmp_path)
    client = KeelClient(settings, examples)
    try:
        orch, worker = services.start("orchestrator"), services.start("worker")
        _, url = hook.start_connector(services, "--ack-timeout", "3")
        wf = "review-outage"
        assert hook.deliver(url, hook.requested("evt-start", wf, "invoice 7"))[0] == 202
        wait_until(lambda: hook.waiting_for_documents(client, wf, 1), 90, "the wait for documents")
        services.kill(orch, signal.SIGTERM)
        services.kill(worker, signal.SIGTERM)

        own_broker.kill_broker(1)
        event = hook.added("evt-1", wf, "receipt")
        status, body = hook.deliver(url, event)
        assert status == 503
        assert body == {"error": "Kafka did not acknowledge the command: Local: Message timed out"}
        status, health = hook.request("GET", f"{url}/healthz")
        assert status == 503 and health["kafka"]["ok"] is False and health["redis"] == {"ok": True}
        assert hook.dedupe_keys(settings) == [
            f"keel:{topic_prefix}:dd:documents:evt-start".encode()
        ]  # the refused delivery left no marker behind

        own_broker.up(timeout_s=180)
        wait_until(lambda: hook.request("GET", f"{url}/healthz")[0] == 200, 90, "Kafka back")
        assert hook.deliver(url, event)[0] == 202
        assert hook.deliver(url, event)[0] == 200

        services.start("orchestrator")
        services.start("worker")
        wait_until(lambda: hook.waiting_for_documents(client, wf, 2), 90, "the second wait")
        assert hook.deliver(url, hook.added("evt-2", wf, "contract"))[0] == 202
        done = client.wait(wf, 90)
        assert done.output == {"decision": "approved", "documents": 3}
        assert hook.signals_received(settings, wf) == [
            {"document": "receipt"},
            {"document": "contract"},
        ]
        assert hook.commands_with_id(settings, message_id("documents", "evt-1")) == 1
    finally:
        services.stop_all()
        client.close()


def test_a_connector_killed_after_the_ack_before_answering_the_retry_is_deduplicated(
    settings, services, client
):
    services.start("orchestrator")
    services.start("worker")
    wf = "review-crash"
    _, url = hook.start_connector(services, "--ack-timeout", "3")
    assert hook.deliver(url, hook.requested("evt-start", wf, "invoice 7"))[0] == 202
    wait_until(lambda: hook.waiting_for_documents(client, wf, 1), 60, "the wait for documents")

    doomed, doomed_url = hook.start_connector(
        services,
        "--ack-timeout",
        "3",
        KEEL_ADAPTER_HOOKS="ops.faults.service_faults:pause_after_ack",
        KEEL_FAULT_PAUSE_S="120",
    )
    event = hook.added("evt-1", wf, "receipt")
    mid = message_id("documents", "evt-1")
    first: list = []

    def send_first() -> None:
        try:
            first.append(hook.deliver(doomed_url, event))
        except OSError as exc:  # the connection dies with the connector
            first.append(type(exc).__name__)

    sender = threading.Thread(target=send_first)
    sender.start()
    wait_until(lambda: hook.commands_with_id(settings, mid) == 1, 60, "the acknowledged record")
    services.kill(doomed, signal.SIGKILL)
    sender.join(timeout=60)
    assert len(first) == 1 and not isinstance(first[0], tuple), first  # never answered

    status, body, attempts = hook.deliver_until_accepted(url, event)
    assert status == 202 and body["message_id"] == mid, attempts
    assert set(attempts[:-1]) <= {409}, attempts  # held off only while the dead claim lived
    assert hook.deliver(url, event)[0] == 200

    assert hook.deliver(url, hook.added("evt-2", wf, "contract"))[0] == 202
    done = client.wait(wf, 60)
    assert done.output == {"decision": "approved", "documents": 3}
    assert hook.signals_received(settings, wf) == [
        {"document": "receipt"},
        {"document": "contract"},
    ]
    assert hook.commands_with_id(settings, mid) == 2  # the record twice, the signal once
