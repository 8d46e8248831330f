"""An application's own payload schemas (``KEEL_SCHEMA_DIRS``): the codec types its values
with them, and with them only; a folder that contradicts Keel's envelope is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator import KeelApp
from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import ActivityScheduled, Envelope
from orchestrator.payload_schemas import declared_schemas, plan_export
from orchestrator.payload_schemas.codec import Codec, load_schema_files, schema_fingerprint

AVRO_DIR = Path(__file__).resolve().parents[3] / "avro"
PAYMENT = '{"payment_id": "p-1", "account": "DE00", "amount": 12.5}'


class Parcel(BaseModel):
    order: str
    boxes: int


def _exported(tmp_path: Path) -> Path:
    """What ``keel schemas export --out`` writes for an application of one activity."""
    app = KeelApp()

    @app.activity("pack_parcel", input=Parcel)
    def pack_parcel(parcel: Parcel) -> None:
        return None

    plan = plan_export(declared_schemas(app), load_schema_files(AVRO_DIR), schema_fingerprint)
    out = tmp_path / "shipping-schemas"
    for rel, text in plan.files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text, encoding="utf-8")
    return out


def _typed(codec: Codec, activity_type: str, input_json: str) -> Any:
    scheduled = ActivityScheduled("wf#1/a", activity_type, "a", input_json, 1, 1, "k")
    env = Envelope("m-1", "wf-1", "run-1", 1, "ActivityScheduled", 1_700_000_000_000, scheduled)
    data = codec.encode(env)
    assert codec.decode(data) == env
    return codec.typed_values(data).get("input_json")


def test_the_applications_schemas_type_its_values_and_the_examples_no_longer(tmp_path):
    bundled = Codec(AVRO_DIR)
    own = Codec(AVRO_DIR, payload_dirs=[_exported(tmp_path)])
    parcel = '{"order": "o-7", "boxes": 3}'
    assert _typed(bundled, "pack_parcel", parcel) is None  # no schema: JSON only
    typed = _typed(own, "pack_parcel", parcel)
    assert typed.fullname == "keel.payload.activity.pack_parcel.Input"
    assert typed.value == {"order": "o-7", "boxes": 3}
    # the bundled examples' schemas type the examples' values only when no folder is named
    assert _typed(bundled, "record_payment", PAYMENT) is not None
    assert _typed(own, "record_payment", PAYMENT) is None
    assert own.version == bundled.version and own.fingerprint == bundled.fingerprint


def test_an_envelope_copy_that_differs_from_keels_is_refused(tmp_path):
    out = _exported(tmp_path)
    [copy] = sorted(out.glob("keel.Envelope.v1.avsc"))
    schema = json.loads(copy.read_text())
    schema["doc"] = "edited after release"
    schema["fields"] = schema["fields"][:-1]
    copy.write_text(json.dumps(schema))
    with pytest.raises(ValueError, match=r"both define keel\.Envelope v1, differently"):
        Codec(AVRO_DIR, payload_dirs=[out])


def test_a_folder_that_is_not_there_is_named(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=f"schema folder {missing} .KEEL_SCHEMA_DIRS. is not"):
        Codec(AVRO_DIR, payload_dirs=[missing])


def test_keel_schema_dirs_is_a_path_list_every_started_process_inherits(monkeypatch, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("KEEL_SCHEMA_DIRS", f"{a}{os.pathsep}{b}")
    settings = Settings()
    assert settings.schema_dirs == (a, b)
    assert settings.child_environment()["KEEL_SCHEMA_DIRS"] == f"{a}{os.pathsep}{b}"
    monkeypatch.delenv("KEEL_SCHEMA_DIRS")
    assert Settings().schema_dirs == ()
    assert "KEEL_SCHEMA_DIRS" not in Settings().child_environment()
