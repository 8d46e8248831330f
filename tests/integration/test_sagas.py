"""The saga manager on the real broker: an order saga across two workflows, reacting to
events and emitting commands only (docs/sagas.md)."""

from __future__ import annotations

import pytest

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.errors import KeelError
from orchestrator.domain.model.messages import CancelWorkflow, WorkflowCancelled
from orchestrator.sagas.manager import SagaManager, require_sagas_topic, sagas_topic
from tests.integration.sagas_app import app as sagas_app
from tests.support import Services, assert_sound_history, decode_all, histories, read_topic

APP = "tests.integration.sagas_app:app"


@pytest.fixture
def order_client(settings):
    c = KeelClient(settings, sagas_app)
    yield c
    c.close()


def test_a_failed_payment_cancels_the_orders_shipment_and_nothing_else(
    settings, tmp_path, order_client
):
    svc = Services(settings, tmp_path)
    try:
        svc.start("orchestrator", "--app", APP)  # runs the saga manager in a thread
        svc.start("worker", "--app", APP)
        c = order_client
        c.start("shipment", {"order_id": "A"}, "ship-A")
        c.start("shipment", {"order_id": "B"}, "ship-B")
        c.start("payment", {"order_id": "B", "amount": 10}, "pay-B")
        c.start("payment", {"order_id": "A", "amount": 500}, "pay-A")
        assert c.wait("pay-A", 60).status == "failed"
        assert c.wait("pay-B", 60).status == "completed"
        assert c.wait("ship-A", 60).status == "cancelled"
        # a shipment that starts after its payment failed is cancelled too
        c.start("shipment", {"order_id": "A"}, "ship-A2")
        assert c.wait("ship-A2", 60).status == "cancelled"
        assert c.show("ship-B").status == "waiting"
    finally:
        svc.stop_all()
    hist = histories(settings)
    for wf in ("ship-A", "ship-A2"):
        assert_sound_history(wf, hist[wf])
        end = hist[wf][-1].payload
        assert isinstance(end, WorkflowCancelled) and end.reason == "order A: payment failed"
    commands = [
        e
        for e in decode_all(
            read_topic(settings.kafka_servers, settings.topic("commands"), settings.partitions)
        )
        if e.message_id.startswith("saga/")
    ]
    # the saga's only output: one cancel per shipment of order A, with ids from the facts
    assert sorted((e.workflow_id, type(e.payload)) for e in commands) == [
        ("ship-A", CancelWorkflow),
        ("ship-A2", CancelWorkflow),
    ]
    facts = decode_all(
        read_topic(settings.kafka_servers, sagas_topic(settings), settings.partitions)
    )
    assert {(f.payload.source_workflow_id, f.payload.event_type) for f in facts} == {
        ("ship-A", "WorkflowStarted"),
        ("ship-B", "WorkflowStarted"),
        ("pay-A", "WorkflowStarted"),
        ("pay-B", "WorkflowStarted"),
        ("pay-A", "WorkflowFailed"),
        ("ship-A2", "WorkflowStarted"),
    }
    assert all(f.workflow_id == f"orders/{f.payload.correlation}" for f in facts)


def test_a_restarted_saga_manager_rebuilds_and_emits_nothing_new(settings, tmp_path, order_client):
    svc = Services(settings, tmp_path)
    try:
        svc.start("orchestrator", "--app", APP, "--no-sagas")
        svc.start("worker", "--app", APP)
        sagas = svc.start("sagas", "--app", APP)
        c = order_client
        c.start("shipment", {"order_id": "C"}, "ship-C")
        c.start("payment", {"order_id": "C", "amount": 900}, "pay-C")
        assert c.wait("ship-C", 60).status == "cancelled"
        svc.kill(sagas)  # SIGKILL
        svc.start("sagas", "--app", APP)
        c.start("shipment", {"order_id": "C"}, "ship-C2")  # payment C already failed
        assert c.wait("ship-C2", 60).status == "cancelled"
    finally:
        svc.stop_all()
    commands = [
        e
        for e in decode_all(
            read_topic(settings.kafka_servers, settings.topic("commands"), settings.partitions)
        )
        if e.message_id.startswith("saga/")
    ]
    assert sorted(e.workflow_id for e in commands) == ["ship-C", "ship-C2"]


def test_the_saga_manager_refuses_to_start_without_its_topic(settings):
    """It never creates ``<prefix>.sagas`` itself: ``keel topics create`` gives it the
    replication every other topic gets."""
    bare = settings.model_copy(update={"topic_prefix": f"{settings.topic_prefix}-bare"})
    with pytest.raises(KeelError) as refused:
        require_sagas_topic(bare)
    assert str(refused.value) == (
        f"topic {bare.topic_prefix}.sagas does not exist; run `keel topics create`"
    )
    manager = SagaManager(bare, sagas_app)
    with pytest.raises(KeelError, match="does not exist; run `keel topics create`"):
        manager.run()
    from orchestrator.io.kafka.topics import admin_client

    assert not any(
        t.startswith(bare.topic_prefix + ".")
        for t in admin_client(bare).list_topics(timeout=30).topics
    )
