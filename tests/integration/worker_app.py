"""A test application: the bundled examples plus activities that misbehave on purpose.

Run by real orchestrator and worker processes with
``--app tests.integration.worker_app:app`` (see ``APP``).
"""

from __future__ import annotations

from typing import Any

from handlers.effects import side_effect
from orchestrator.app import KeelApp
from orchestrator.definitions import Context, RetryPolicy, Step, WorkflowDefinition
from orchestrator.examples import app as examples
from orchestrator.examples.invoices import Invoice, Posting, post_to_ledger

APP = "tests.integration.worker_app:app"

app = KeelApp("keel-worker-tests")
app.definitions.update(examples.definitions)
app.handlers.update(examples.handlers)


@app.activity("post_then_misreport", input=Invoice, output=Posting)
@side_effect
async def post_then_misreport(invoice: Invoice) -> dict[str, Any]:
    """Posts to the ledger for real, then returns a result that fails its output model."""
    posting = await post_to_ledger(invoice)
    return {"posting": posting.posting_id}


@app.activity("huge_result")
def huge_result(req: dict[str, Any]) -> dict[str, Any]:
    """Returns a result larger than MAX_PAYLOAD_BYTES (the size asked for)."""
    return {"blob": "x" * int(req["bytes"])}


def _invoice(ctx: Context) -> dict[str, Any]:
    return dict(ctx.input_dict)


misreported_posting = app.workflow(
    WorkflowDefinition.dag(
        "misreported_posting",
        1,
        Invoice,
        [
            Step(
                "post",
                "post_then_misreport",
                input=_invoice,
                retry=RetryPolicy(max_attempts=3, initial_interval_ms=100),
            )
        ],
        output=lambda ctx: ctx.results["post"],
        description="A posting whose handler returns a result of the wrong shape.",
    )
)


# -- helpers for tests that talk to the worker through the real topics -----------------


def task_envelope(
    workflow_id: str,
    activity_type: str,
    input_json: str,
    *,
    attempt: int = 1,
    activity_id: str = "run#1/step",
    message_id: str | None = None,
):
    """An ActivityTask as the orchestrator would send it (idempotency key ``wf/type/1``)."""
    import time

    from orchestrator.domain.messages import ActivityTask, Envelope

    return Envelope(
        message_id=message_id or f"test/{workflow_id}/{activity_type}/{attempt}",
        workflow_id=workflow_id,
        run_id="r1",
        seq=0,
        type="ActivityTask",
        recorded_at=int(time.time() * 1000),
        payload=ActivityTask(
            activity_id,
            activity_type,
            "step",
            input_json,
            1,
            attempt,
            f"{workflow_id}/{activity_type}/1",
        ),
    )


def produce(settings, topic_kind: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    """Produce raw ``(key, value)`` records to a Keel topic and wait for the broker."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": settings.kafka_servers, "message.max.bytes": 2_000_000}
    )
    for key, value in records:
        producer.produce(settings.topic(topic_kind), key=key, value=value)
    assert producer.flush(30) == 0


def reports(settings, workflow_id: str | None = None) -> list:
    """Every command on the commands topic (decoded), optionally of one workflow."""
    from orchestrator.codec import default_codec
    from tests.support import read_topic

    codec = default_codec()
    records = read_topic(
        settings.kafka_servers, settings.topic("commands"), settings.partitions, max_s=2
    )
    found = [codec.decode(r.value()) for r in records]
    return [e for e in found if workflow_id is None or e.workflow_id == workflow_id]
