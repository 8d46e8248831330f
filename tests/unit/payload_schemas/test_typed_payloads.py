"""Typed payloads in envelope v8: written next to the JSON, byte-identical on both writer
paths, exact or absent, resolved by fingerprint; records of v1-v7 stay readable."""

from __future__ import annotations

import json
import shutil
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    Envelope,
    StateEntered,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowStarted,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.state_parts import ActivityState
from orchestrator.payload_schemas import schema_json
from orchestrator.payload_schemas.codec import Codec, DecodeError
from orchestrator.payload_schemas.typed import MAX_TYPED_BYTES

AVRO_DIR = Path(__file__).resolve().parents[3] / "avro"
PAYMENT = '{"payment_id": "p-1", "account": "DE00", "amount": 12.5}'
CODEC = Codec(AVRO_DIR)


def _env(payload: Any, seq: int = 1) -> Envelope[Any]:
    return Envelope("m-1", "wf-1", "run-1", seq, type(payload).__name__, 1_700_000_000_000, payload)


def _both(env: Envelope[Any], hint: Any = None, codec: Codec = CODEC) -> bytes:
    data = codec.encode(env, hint)
    assert data == codec.encode_reference(env, hint)  # compiled writer == fastavro
    assert codec.decode(data) == env == codec.decode_reference(data)  # the domain reads JSON
    return data


def test_a_start_and_a_scheduled_activity_type_themselves() -> None:
    started = WorkflowStarted(
        "payment_approval", 1, "digest", '{"payment_id": "p", "account": "a", '
        '"amount": 3, "requested_by": "ann"}',
    )  # fmt: skip
    typed = CODEC.typed_values(_both(_env(started)))["input_json"]
    assert typed.fullname == "keel.payload.workflow.payment_approval.v1.Input"
    assert typed.version == 1
    assert typed.value == {"payment_id": "p", "account": "a", "amount": 3.0, "requested_by": "ann"}
    scheduled = ActivityScheduled("pay#1/pay", "record_payment", "pay", PAYMENT, 1, 1, "k")
    typed = CODEC.typed_values(_both(_env(scheduled)))["input_json"]
    assert typed.fullname == "keel.payload.activity.record_payment.Input"
    assert typed.value == json.loads(PAYMENT)


def test_a_missing_field_takes_its_schema_default() -> None:
    scheduled = ActivityScheduled("s#1/s", "sleep", "s", '{"seconds": 1}', 1, 1, "k")
    value = CODEC.typed_values(_both(_env(scheduled)))["input_json"].value
    assert value == {"seconds": 1.0, "heartbeat": False}


def _state() -> WorkflowState:
    act = ActivityState("pay#1/pay", "record_payment", "pay", "pay", 1, PAYMENT, 1, 1, "k")
    state = WorkflowState("wf-1", "run-1", "payment_approval", 1, "digest", "{}")
    state.activities[act.activity_id] = act
    return state


def test_results_and_outputs_are_typed_by_their_runs_hint() -> None:
    state = _state()
    done = ActivityCompleted("pay#1/pay", 1, '{"payment_id": "p-1", "recorded": true}')
    assert CODEC.typed_values(_both(_env(done))) == {}  # the event alone does not say
    typed = CODEC.typed_values(_both(_env(done), CODEC.hint(state, done)))["result_json"]
    assert typed.fullname == "keel.payload.activity.record_payment.Result"
    assert typed.value == {"payment_id": "p-1", "recorded": True}
    out = WorkflowCompleted('{"status": "paid", "payment_id": "p-1", "decided_by": null}')
    typed = CODEC.typed_values(_both(_env(out), CODEC.hint(state, out)))["output_json"]
    assert typed.fullname == "keel.payload.workflow.payment_approval.v1.Output"
    assert typed.value["decided_by"] is None
    again = WorkflowContinuedAsNew("run-2", '{"payment_id": "p", "account": "a"}')  # no fit
    assert CODEC.typed_values(_both(_env(again), CODEC.hint(state, again))) == {}
    assert CODEC.hint(state, ActivityCompleted("gone#1/x", 1, "{}")) is None
    assert CODEC.hint(state, StateEntered("pay", 1)) is None


@pytest.mark.parametrize(
    "input_json",
    [
        '{"payment_id": "p", "account": "a", "amount": 1, "extra": 1}',  # a key it lacks
        '{"payment_id": "p", "account": "a"}',  # a required field missing
        '{"payment_id": 7, "account": "a", "amount": 1}',  # the wrong type
        '{"payment_id": {"$keel_sealed": "x", "kid": "k"}, "account": "a", "amount": 1}',
        '{"payment_id": "p", "account": "a", "amount": true}',  # a bool is not a number
        "[1, 2]",
        "",
    ],
)
def test_what_does_not_fit_stays_json_only(input_json: str) -> None:
    codec = Codec(AVRO_DIR)
    scheduled = ActivityScheduled("p#1/p", "record_payment", "p", input_json, 1, 1, "k")
    assert codec.typed_values(_both(_env(scheduled), codec=codec)) == {}
    assert codec.payloads.untyped == (2 if input_json else 0)  # both writer paths counted


def test_a_typed_value_past_one_json_values_limit_stays_json_only() -> None:
    """(Avro can be larger than its JSON: a double is 8 bytes, ``0,`` two.)"""
    codec = Codec(AVRO_DIR)
    big = json.dumps({"documents": ["x"] * 10})
    scheduled = ActivityScheduled("r#1/r", "review_document", "r", big, 1, 1, "k")
    assert codec.typed_values(codec.encode(_env(scheduled)))  # small: typed
    wide = json.dumps({"documents": ["x" * 1000] * (MAX_TYPED_BYTES // 1000)})
    scheduled = ActivityScheduled("r#1/r", "review_document", "r", wide, 1, 1, "k")
    assert codec.typed_values(_both(_env(scheduled), codec=codec)) == {}
    assert codec.payloads.untyped == 2


def test_unbound_types_and_free_form_models_stay_json_only() -> None:
    for activity_type in ("no_such_activity", "booking_status"):
        scheduled = ActivityScheduled("q#1/q", activity_type, "q", '{"input": {}}', 1, 1, "k")
        assert CODEC.typed_values(_both(_env(scheduled))) == {}


def test_the_compiled_writer_writes_what_fastavro_writes() -> None:
    """Every published schema, and the generator's test model with every mapped type."""
    from fastavro import parse_schema, schemaless_writer

    from orchestrator.payload_schemas.binary import compile_writer
    from orchestrator.payload_schemas.codec import load_schema_files
    from orchestrator.payload_schemas.generator import model_schema
    from tests.unit.payload_schemas.test_payload_generator import Order

    order = model_schema(Order, "t", "Input")
    value = {
        "order_id": "o-1", "total": 10, "note": None, "channel": None,
        "lines": [{"sku": "a"}, {"sku": "b", "qty": 2}], "tags": [], "attrs": {"x": -1, "y": 2**40},
        "size": "S", "colour": "dark-blue", "amount": "1.50", "at": "2026-01-01T00:00:00Z",
        "day": "2026-01-01", "ref": "6f1c0a52-0000-4000-8000-000000000000",
        "gift": {"sku": "g", "qty": 1},
    }  # fmt: skip
    cases = [(order, value)]
    for f in load_schema_files(AVRO_DIR):
        if f.name.startswith("keel.payload."):
            cases.append((f.schema, _sample(f.schema)))
    for schema, datum in cases:
        ours = bytearray()
        compile_writer(schema)(datum, ours)
        theirs = BytesIO()
        full = {
            **datum,
            **{k: v["default"] for k, v in _defaults(schema).items() if k not in datum},
        }
        schemaless_writer(theirs, parse_schema(schema), full)
        assert bytes(ours) == theirs.getvalue(), schema["name"]


def _sample(t: Any) -> Any:
    """A value of payload schema type ``t`` (every field present, nullable ones not null)."""
    if isinstance(t, list):
        return _sample(next(b for b in t if b != "null"))
    if isinstance(t, str):
        return {"string": "s é", "long": -3, "double": 1.5, "boolean": True}[t]
    kind = t["type"]
    if kind == "record":
        return {f["name"]: _sample(f["type"]) for f in t["fields"]}
    if kind == "array":
        return [_sample(t["items"])] * 2
    if kind == "map":
        return {"k": _sample(t["values"])}
    if kind == "enum":
        return t["symbols"][-1]
    return _sample(kind)


def _defaults(schema: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: f for f in schema["fields"] if "default" in f}


def _copy(tmp: Path, keep: Any) -> Path:
    out = tmp / "avro"
    shutil.copytree(AVRO_DIR, out, ignore=lambda d, names: [n for n in names if not keep(n)])
    return out


def test_records_of_every_older_envelope_version_stay_readable(tmp_path: Path) -> None:
    scheduled = ActivityScheduled("pay#1/pay", "record_payment", "pay", PAYMENT, 1, 1, "k")
    for version in range(1, CODEC.version):
        older = tmp_path / f"v{version}"
        older.mkdir()
        shutil.copy(AVRO_DIR / f"keel.Envelope.v{version}.avsc", older)
        old = Codec(older).encode(_env(scheduled))
        env = CODEC.decode(old)
        assert env.payload.input_json == PAYMENT  # the JSON payload, as written
        assert CODEC.typed_values(old) == {}


def test_a_value_is_resolved_to_the_newest_version_of_its_schema(tmp_path: Path) -> None:
    writer = Codec(_copy(tmp_path, lambda n: True))
    data = writer.encode(
        _env(ActivityScheduled("p#1/p", "record_payment", "p", PAYMENT, 1, 1, "k"))
    )
    folder = AVRO_DIR / "payloads" / "activity" / "record_payment"
    v1 = json.loads((folder / "keel.payload.activity.record_payment.Input.v1.avsc").read_text())
    v2 = {**v1, "fields": [*v1["fields"], {"name": "memo", "type": "string", "default": "-"}]}
    newer = tmp_path / "newer"
    shutil.copytree(tmp_path / "avro", newer)
    target = newer / "payloads" / "activity" / "record_payment"
    (target / "keel.payload.activity.record_payment.Input.v2.avsc").write_text(schema_json(v2))
    reader = Codec(newer)
    typed = reader.typed_values(data)["input_json"]
    assert (typed.version, typed.value["memo"]) == (1, "-")  # v1's data, read as v2
    rewritten = reader.encode(reader.decode(data))  # new writes use v2
    assert reader.typed_values(rewritten)["input_json"].version == 2


def test_an_unknown_payload_fingerprint_is_a_decode_error(tmp_path: Path) -> None:
    data = CODEC.encode(_env(ActivityScheduled("p#1/p", "record_payment", "p", PAYMENT, 1, 1, "k")))
    envelopes_only = _copy(tmp_path, lambda n: n.startswith("keel.Envelope"))
    codec = Codec(envelopes_only)
    assert codec.decode(data).payload.input_json == PAYMENT  # the event stays readable
    with pytest.raises(DecodeError, match="unknown payload schema fingerprint"):
        codec.typed_values(data)
