"""The payload schemas in avro/payloads/: published for the bundled examples, never edited.

``test_published_schemas_are_the_models_current_ones`` is the rule that keeps them true: a
changed model fails it until ``keel schemas export --out avro`` publishes a new version.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.examples import app
from orchestrator.payload_schemas import Binding, declared_schemas, plan_export
from orchestrator.payload_schemas.codec import load_schema_files, schema_fingerprint

AVRO_DIR = Path(__file__).resolve().parents[3] / "avro"
PAYLOAD_FILES = [f for f in load_schema_files(AVRO_DIR) if f.name.startswith("keel.payload.")]

#: Fingerprints of released payload schemas: releasing one means adding it here, and the
#: test then fails if anyone edits it (which would orphan every value written with it).
RELEASED: dict[tuple[str, int], str] = {
    ("keel.payload.activity.add_one.Input", 1): "fc683b084065a6ac",
    ("keel.payload.activity.add_one.Result", 1): "1bdb76ef9d749789",
    ("keel.payload.activity.cancel_reservation.Input", 1): "5f1f10a100956919",
    ("keel.payload.activity.charge_card.Input", 1): "579101754c536e09",
    ("keel.payload.activity.check_a.Input", 1): "59c8d7eecc114b00",
    ("keel.payload.activity.check_a.Result", 1): "2a30f67b3fe1fefc",
    ("keel.payload.activity.check_b.Input", 1): "3fdd8340440be89e",
    ("keel.payload.activity.check_b.Result", 1): "1d56a80d4b00b04b",
    ("keel.payload.activity.check_c.Input", 1): "04eb2ae210c3e06a",
    ("keel.payload.activity.check_c.Result", 1): "e94e07e74b611ca7",
    ("keel.payload.activity.combine_checks.Input", 1): "e280748c1a28c77d",
    ("keel.payload.activity.combine_checks.Result", 1): "0a2871e2381d747f",
    ("keel.payload.activity.double.Input", 1): "41d6339556c9156e",
    ("keel.payload.activity.double.Result", 1): "bef15a346a997ceb",
    ("keel.payload.activity.post_to_ledger.Input", 1): "e23930a60e38c393",
    ("keel.payload.activity.post_to_ledger.Result", 1): "dd6e7be68de69f6a",
    ("keel.payload.activity.record_payment.Input", 1): "a505481a6e787cfc",
    ("keel.payload.activity.record_payment.Result", 1): "dbaa41481495a935",
    ("keel.payload.activity.reserve_flight.Input", 1): "6692329e38920864",
    ("keel.payload.activity.reserve_flight.Result", 1): "9061e8b1b17261fc",
    ("keel.payload.activity.reserve_hotel.Input", 1): "623e7e4ba20b0d90",
    ("keel.payload.activity.reserve_hotel.Result", 1): "216502c9b68032fc",
    ("keel.payload.activity.review_document.Input", 1): "1743404fa5dfd38f",
    ("keel.payload.activity.review_document.Result", 1): "5bac16c4f43ddfea",
    ("keel.payload.activity.sleep.Input", 1): "129347ccda68a9fe",
    ("keel.payload.activity.square.Input", 1): "922f3e3a7b6e1555",
    ("keel.payload.activity.square.Result", 1): "5e13af3d4f2929b6",
    ("keel.payload.activity.summarize_document.Input", 1): "6dabe5fbd0cd6e7c",
    ("keel.payload.activity.summarize_document.Result", 1): "a7fae1f68d0986ef",
    ("keel.payload.workflow.document_review.v1.Input", 1): "cb54c841a6b844d3",
    ("keel.payload.workflow.document_review.v1.Output", 1): "c22c0d08e777401d",
    ("keel.payload.workflow.checks_batch.v1.Input", 1): "a943958832c8b51d",
    ("keel.payload.workflow.invoice_batch.v1.Input", 1): "03631c7a9bbde524",
    ("keel.payload.workflow.summaries_batch.v1.Input", 1): "35985e578a4916d9",
    ("keel.payload.workflow.timers_batch.v1.Input", 1): "da9c6341630c784c",
    ("keel.payload.workflow.invoice_batch.v1.Output", 1): "a2b2eba3664761f2",
    ("keel.payload.workflow.invoice_posting.v1.Input", 1): "220a0ad9a8e4420e",
    ("keel.payload.workflow.invoice_posting_patient.v1.Input", 1): "435b443663121472",
    ("keel.payload.workflow.parallel_checks.v1.Input", 1): "4322039d17a68e77",
    ("keel.payload.workflow.payment_approval.v1.Input", 1): "13e138426260b6eb",
    ("keel.payload.workflow.payment_approval.v1.Output", 1): "0cfefe3fc4be88a8",
    ("keel.payload.workflow.slow_step.v1.Input", 1): "6680b5730ec2dcf0",
    ("keel.payload.workflow.three_step.v1.Input", 1): "0c153e48a7fa1349",
    ("keel.payload.workflow.timer_demo.v1.Input", 1): "ffad306225a77b31",
    ("keel.payload.workflow.travel_booking.v1.Input", 1): "b89d942027d7e958",
}


def test_published_schemas_are_the_models_current_ones() -> None:
    plan = plan_export(declared_schemas(app), load_schema_files(AVRO_DIR), schema_fingerprint)
    assert plan.new == (), (
        "a model changed without a published schema version: run "
        "`keel schemas export --out avro` and commit the new files (never edit a released one)"
    )


def test_released_payload_fingerprints_are_pinned() -> None:
    assert PAYLOAD_FILES
    for f in PAYLOAD_FILES:
        key = (f.name, f.version)
        assert key in RELEASED, f"{f.path.name}: add {key!r}: {f.fingerprint.hex()!r} to RELEASED"
        assert f.fingerprint.hex() == RELEASED[key], f"{f.path.name} was edited after release"


def test_each_file_states_its_binding_and_sits_in_its_folder() -> None:
    for f in PAYLOAD_FILES:
        binding = Binding.of(f.schema)
        assert binding is not None, f.path.name
        assert binding.fullname == f.name
        assert f.path.parent == AVRO_DIR / "payloads" / binding.folder


def test_untyped_models_are_the_ones_with_free_form_fields() -> None:
    untyped = {d.binding.fullname: d.reason for d in declared_schemas(app) if d.schema is None}
    assert untyped == {
        "keel.payload.activity.booking_status.Input": "StatusQuery.input: Any has no Avro form",
        "keel.payload.activity.ledger_posting_status.Input": (
            "StatusQuery.input: Any has no Avro form"
        ),
    }
