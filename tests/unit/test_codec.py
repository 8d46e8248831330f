"""Keel's single-object Avro codec: round trips, exact header bytes, every error reason."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import (
    PAYLOAD_TYPES,
    DeadLetter,
    Envelope,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    TimerFired,
)
from orchestrator.payload_schemas.codec import (
    MAGIC,
    Codec,
    DecodeError,
    codec_for,
    default_schema_dir,
    rabin_fingerprint,
    schema_fingerprint,
)

AVRO_DIR = Path(__file__).resolve().parents[2] / "avro"
V1 = AVRO_DIR / "keel.Envelope.v1.avsc"
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec(AVRO_DIR)


def _newest_schema() -> dict[str, Any]:
    path = max(
        AVRO_DIR.glob("keel.Envelope.v*.avsc"), key=lambda p: int(p.name.split(".v")[1][:-5])
    )
    return json.loads(path.read_text())


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return next(f["type"] for f in schema["fields"] if f["name"] == "payload")


def _v2_schema(extra_field: dict[str, Any] | None = None) -> dict[str, Any]:
    """A synthetic successor of the newest schema: adds an envelope field, a TimerFired
    field and a new payload branch (all compatible unless ``extra_field`` breaks it)."""
    s = copy.deepcopy(_newest_schema())
    s["fields"].append({"name": "tenant_id", "type": ["null", "string"], "default": None})
    branches = _branches(s)
    timer = next(b for b in branches if b["name"] == "keel.TimerFired")
    timer["fields"].append({"name": "priority", "type": "int", "default": 0})
    if extra_field is not None:
        timer["fields"].append(extra_field)
    branches.append(
        {"type": "record", "name": "keel.Frobnicated", "fields": [{"name": "x", "type": "string"}]}
    )
    return s


def _dir_with(tmp_path: Path, extra: dict[str, Any] | None, *, version: int = 2) -> Path:
    """A schema directory holding the repo's files plus ``extra`` as the next version."""
    d = tmp_path / "avro"
    d.mkdir()
    for f in AVRO_DIR.glob("*.avsc"):
        shutil.copy(f, d / f.name)
    if extra is not None:
        (d / f"keel.Envelope.v{version}.avsc").write_text(json.dumps(extra))
    return d


def _newest_version() -> int:
    return max(int(p.name.split(".v")[1][:-5]) for p in AVRO_DIR.glob("keel.Envelope.v*.avsc"))


# ---------------------------------------------------------------------------
# Hypothesis strategies derived from the dataclasses and the current schema.
# ---------------------------------------------------------------------------


def _field_types() -> dict[str, dict[str, Any]]:
    return {
        b["name"].split(".")[-1]: {f["name"]: f["type"] for f in b["fields"]}
        for b in _branches(_newest_schema())
    }


def _strategy(avro_type: Any) -> st.SearchStrategy[Any]:
    if isinstance(avro_type, list):
        return st.one_of(*(_strategy(t) for t in avro_type))
    if isinstance(avro_type, dict):
        return _strategy(avro_type["type"])
    return {
        "null": st.none(),
        "string": st.text(),
        "bytes": st.binary(max_size=64),
        "int": st.integers(*INT32),
        "long": st.integers(*INT64),
        "boolean": st.booleans(),
    }[avro_type]


_TYPES = _field_types()


def _payloads() -> st.SearchStrategy[Any]:
    return st.one_of(
        *(
            st.builds(
                cls, **{f.name: _strategy(_TYPES[name][f.name]) for f in dataclasses.fields(cls)}
            )
            for name, cls in PAYLOAD_TYPES.items()
        )
    )


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope[Any]:
    payload = draw(_payloads())
    opt = st.none() | st.text()
    return Envelope(
        message_id=draw(st.text()),
        workflow_id=draw(st.text()),
        run_id=draw(st.text()),
        seq=draw(st.integers(*INT64)),
        type=type(payload).__name__,
        recorded_at=draw(st.integers(*INT64)),
        payload=payload,
        causation_id=draw(opt),
        correlation_id=draw(opt),
        traceparent=draw(opt),
    )


def _env(payload: Any, **kw: Any) -> Envelope[Any]:
    base: dict[str, Any] = dict(
        message_id="m",
        workflow_id="w",
        run_id="r",
        seq=1,
        type=type(payload).__name__,
        recorded_at=5,
        payload=payload,
    )
    base.update(kw)
    return Envelope(**base)


# ---------------------------------------------------------------------------
# Fingerprint and header
# ---------------------------------------------------------------------------


def test_rabin_empty_string_is_the_spec_seed() -> None:
    assert rabin_fingerprint(b"") == 0xC15D213AA4D7A795


@pytest.mark.parametrize(
    "text", ['"int"', '"string"', '{"type":"fixed","name":"f","size":4}', "é∂"]
)
def test_rabin_matches_fastavro(text: str) -> None:
    ours = rabin_fingerprint(text.encode()).to_bytes(8, "little")
    assert ours.hex() == fastavro_fingerprint(text, "CRC-64-AVRO")


def test_schema_fingerprint_ignores_docs_and_logical_types() -> None:
    s = json.loads(V1.read_text())
    stripped = copy.deepcopy(s)
    stripped.pop("doc")
    stripped["fields"][5]["type"] = "long"  # recorded_at without logicalType
    assert schema_fingerprint(s) == schema_fingerprint(stripped)
    pcf = to_parsing_canonical_form(s)
    assert schema_fingerprint(s).hex() == fastavro_fingerprint(pcf, "CRC-64-AVRO")


def test_header_bytes_exact(codec: Codec) -> None:
    data = codec.encode(_env(TimerFired("t")))
    assert data[:2] == b"\xc3\x01" == MAGIC
    assert data[2:10] == codec.fingerprint
    assert len(codec.fingerprint) == 8
    assert Codec.fingerprint_of(data) == codec.fingerprint
    newest = AVRO_DIR / f"keel.Envelope.v{codec.version}.avsc"
    assert codec.fingerprint == schema_fingerprint(json.loads(newest.read_text()))


def test_v1_golden_bytes(tmp_path: Path) -> None:
    """v1 is frozen, so its exact encoding is too (pins field order and union index)."""
    d = tmp_path / "v1"
    d.mkdir()
    shutil.copy(V1, d / V1.name)
    c = Codec(d)
    env = _env(TimerFired("t"), causation_id="c")
    expected = (
        bytes.fromhex("c301" + "9cf17394915162a9")
        + b"\x02m\x02w\x02r\x02"  # message_id, workflow_id, run_id, seq=1
        + b"\x14TimerFired\x0a"  # type, recorded_at=5
        + b"\x18\x02t"  # union branch 12 (TimerFired), timer_id
        + b"\x02\x02c\x00\x00"  # causation_id="c", correlation_id, traceparent = null
    )
    assert c.encode(env) == expected
    assert c.decode(expected) == env


# ---------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(envelopes())
def test_round_trip_every_payload_type(env: Envelope[Any]) -> None:
    codec = Codec()
    out = codec.decode(codec.encode(env))
    assert out == env
    assert out.traceparent == env.traceparent  # excluded from ==
    assert type(out.payload) is type(env.payload)


@pytest.mark.parametrize("name", sorted(PAYLOAD_TYPES))
def test_round_trip_each_type_extremes(codec: Codec, name: str) -> None:
    cls = PAYLOAD_TYPES[name]
    types = _TYPES[name]

    def extreme(t: Any, high: bool) -> Any:
        if isinstance(t, list):
            return None if not high else extreme(t[1], high)
        return {
            "string": "ü€𝄞\x00" if high else "",
            "bytes": b"\x00\xff" if high else b"",
            "int": INT32[1] if high else INT32[0],
            "long": INT64[1] if high else INT64[0],
            "boolean": high,
        }[t]

    for high in (False, True):
        payload = cls(**{f.name: extreme(types[f.name], high) for f in dataclasses.fields(cls)})
        env = _env(payload, seq=INT64[1] if high else 0, recorded_at=INT64[0] if high else 0)
        assert codec.decode(codec.encode(env)) == env


def test_decode_accepts_memoryview_and_bytearray(codec: Codec) -> None:
    env = _env(StartWorkflow("ingest", None, "{}"), traceparent="00-ab-cd-01")
    data = codec.encode(env)
    assert codec.decode(memoryview(data)) == env
    assert codec.decode(bytearray(data)).traceparent == "00-ab-cd-01"


def test_codec_for_settings_uses_repo_schemas_and_the_payload_dirs(tmp_path) -> None:
    assert codec_for(Settings(home=tmp_path)).fingerprint == Codec(AVRO_DIR).fingerprint
    assert default_schema_dir() == AVRO_DIR
    assert Codec().fingerprint == Codec(AVRO_DIR).fingerprint


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def _raises(codec: Codec, data: bytes) -> str:
    with pytest.raises(DecodeError) as info:
        codec.decode(data)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_error_too_short(codec: Codec) -> None:
    assert _raises(codec, b"\xc3\x01abc") == "too short for single-object encoding: 5 bytes < 10"
    assert _raises(codec, b"") == "too short for single-object encoding: 0 bytes < 10"


def test_error_bad_marker(codec: Codec) -> None:
    data = codec.encode(_env(TimerFired("t")))
    assert _raises(codec, b"\x00\x01" + data[2:]) == "bad marker: expected c301, got 0001"
    assert _raises(codec, b"{}" + data[2:]) == "bad marker: expected c301, got 7b7d"
    with pytest.raises(DecodeError, match=r"^bad marker"):
        Codec.fingerprint_of(b"\x00" * 10)


def test_error_unknown_fingerprint(codec: Codec) -> None:
    data = MAGIC + bytes(range(8)) + b"\x00"
    assert _raises(codec, data) == "unknown writer schema fingerprint 0001020304050607"


def test_error_corrupt_datum(codec: Codec) -> None:
    data = codec.encode(_env(TimerFired("t")))
    assert _raises(codec, data[:10]) == "corrupt datum: EOFError"
    assert _raises(codec, data + b"xx") == "corrupt datum: 2 trailing bytes"
    assert _raises(codec, data[:-4]).startswith("corrupt datum: EOFError")
    bad_utf8 = data[:10] + b"\x02\xff" + data[12:]
    assert _raises(codec, bad_utf8).startswith("corrupt datum: UnicodeDecodeError: ")
    bad_branch = data[:10] + b"\x02m\x02w\x02r\x02\x14TimerFired\x0a\x7f"
    assert _raises(codec, bad_branch).startswith("corrupt datum: ")


def test_error_type_does_not_match_payload(codec: Codec) -> None:
    out = BytesIO()
    out.write(MAGIC + codec.fingerprint)
    record = {
        "message_id": "m",
        "workflow_id": "w",
        "run_id": "r",
        "seq": 1,
        "type": "Lies",
        "recorded_at": 5,
        "payload": ("keel.TimerFired", {"timer_id": "t"}),
    }
    schemaless_writer(out, codec.schema, record)
    msg = "envelope type 'Lies' does not match payload keel.TimerFired"
    assert _raises(codec, out.getvalue()) == msg


def test_error_unknown_payload_type(tmp_path: Path) -> None:
    c2 = Codec(_dir_with(tmp_path, _v2_schema(), version=_newest_version() + 1))
    out = BytesIO()
    out.write(MAGIC + c2.fingerprint)
    record = {
        "message_id": "m",
        "workflow_id": "w",
        "run_id": "r",
        "seq": 1,
        "type": "Frobnicated",
        "recorded_at": 5,
        "payload": ("keel.Frobnicated", {"x": "y"}),
    }
    schemaless_writer(out, parse_schema(_v2_schema()), record)
    assert _raises(c2, out.getvalue()) == "unknown payload type keel.Frobnicated"


def test_error_unresolvable_writer(tmp_path: Path, codec: Codec) -> None:
    v = _newest_version() + 1
    broken = _v2_schema(extra_field={"name": "must", "type": "string"})
    c2 = Codec(_dir_with(tmp_path, broken, version=v))
    data = codec.encode(_env(TimerFired("t")))
    assert _raises(c2, data) == (
        f"cannot resolve writer schema {codec.fingerprint.hex()} (v{codec.version}) to v{v}: "
        "SchemaResolutionError: No default value for field must in keel.TimerFired"
    )


def test_encode_rejects_unknown_payload_and_type_mismatch(codec: Codec) -> None:
    with pytest.raises(ValueError, match="cannot encode payload of type str"):
        codec.encode(_env("not a payload", type="str"))
    with pytest.raises(ValueError, match="envelope type 'FireTimer' does not match payload"):
        codec.encode(_env(TimerFired("t"), type="FireTimer"))


# ---------------------------------------------------------------------------
# Versions: a reader that knows a newer version; schema directory hygiene
# ---------------------------------------------------------------------------


def test_reader_with_extra_version_decodes_old_and_new(tmp_path: Path, codec: Codec) -> None:
    v = _newest_version() + 1
    c2 = Codec(_dir_with(tmp_path, _v2_schema(), version=v))
    assert c2.version == v
    assert c2.fingerprint != codec.fingerprint
    assert c2.known_fingerprints() == {**codec.known_fingerprints(), c2.fingerprint: v}

    dl = DeadLetter("keel.events", 3, 2**40, "boom", None, b"\x00")
    for env in (_env(TimerFired("t")), _env(dl, correlation_id="c")):
        old = codec.encode(env)
        assert c2.decode(old) == env  # old writer resolved to the new reader
        new = c2.encode(env)  # new writer: defaults fill fields the dataclass lacks
        assert new[2:10] == c2.fingerprint
        assert c2.decode(new) == env
        with pytest.raises(DecodeError, match=r"^unknown writer schema fingerprint"):
            codec.decode(new)  # an old reader cannot know a future schema


def test_schema_dir_rejects_bad_files(tmp_path: Path) -> None:
    d = _dir_with(tmp_path, None)
    (d / "envelope.avsc").write_text("{}")
    with pytest.raises(ValueError, match=re.escape("is not named <fullname>.v<N>.avsc")):
        Codec(d)
    (d / "envelope.avsc").unlink()

    other = json.loads(V1.read_text())
    other["name"] = "keel.Other"
    (d / "keel.Envelope.v99.avsc").write_text(json.dumps(other))
    with pytest.raises(ValueError, match=re.escape("does not define the named type keel.Envelope")):
        Codec(d)

    same = json.loads(V1.read_text())
    same["doc"] = "only the doc changed"
    (d / "keel.Envelope.v99.avsc").write_text(json.dumps(same))
    with pytest.raises(ValueError, match="same canonical form as v1"):
        Codec(d)


def test_empty_schema_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no keel.Envelope.v<N>.avsc schema found"):
        Codec(tmp_path)


def test_v2_signals_decode_under_v3_without_a_correlation(tmp_path: Path) -> None:
    """Records written before correlations existed read back with ``correlation=None``."""
    d = tmp_path / "v2"
    d.mkdir()
    for v in (1, 2):
        shutil.copy(AVRO_DIR / f"keel.Envelope.v{v}.avsc", d)
    old, new = Codec(d), Codec(AVRO_DIR)
    newest = max(int(p.name.split(".v")[1].split(".")[0]) for p in AVRO_DIR.glob("*.avsc"))
    assert newest >= 3 and (old.version, new.version) == (2, newest)
    for payload in (SignalWorkflow("go", '{"a": 1}'), SignalReceived("go", "{}")):
        data = old.encode(_env(payload))
        assert data[2:10] == old.fingerprint != new.fingerprint
        decoded = new.decode(data)
        assert decoded == _env(payload) and decoded.payload.correlation is None
