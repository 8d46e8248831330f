"""Old events must stay readable forever: every schema version resolves against its successor.

The pairs are discovered from ``avro/``, so a new ``vN+1`` is checked automatically.
A synthetic v2 (built here, never committed) proves the check passes for compatible
changes and fails for incompatible ones. The newest schema must also match the message
catalogue exactly, so the dataclasses and the wire format can never drift apart.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from collections import defaultdict
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError

from orchestrator.domain.model.messages import PAYLOAD_TYPES, Envelope
from orchestrator.payload_schemas.codec import (
    ENVELOPE_NAME,
    TYPED_FIELDS,
    SchemaFile,
    load_schema_files,
)

AVRO_DIR = Path(__file__).resolve().parents[2] / "avro"
FILES = load_schema_files(AVRO_DIR)

#: Fingerprints of released files. Releasing vN means adding it here; the test then
#: fails if anyone edits a released file (which would orphan every record it wrote).
RELEASED: dict[tuple[str, int], str] = {
    (ENVELOPE_NAME, 1): "9cf17394915162a9",
    (ENVELOPE_NAME, 2): "3e7fdd00ab50ba19",
    (ENVELOPE_NAME, 3): "9586d4f1dbab3b95",
    (ENVELOPE_NAME, 4): "72b0c36691cfa129",
    (ENVELOPE_NAME, 5): "b737d4609e11b2cd",
    (ENVELOPE_NAME, 6): "03d6ba38db0f881e",
    (ENVELOPE_NAME, 7): "2d4a473538a44be1",
    (ENVELOPE_NAME, 8): "f3d737aca4923d58",
    (ENVELOPE_NAME, 9): "0f0a3cef66008203",
    (ENVELOPE_NAME, 10): "ce97da7441ebc373",
    (ENVELOPE_NAME, 11): "1c0555d94cb9be5b",
}
#: The envelope's versions (payload schemas: tests/unit/payload_schemas/).
ENVELOPES = [f for f in FILES if f.name == ENVELOPE_NAME]


def _by_name() -> dict[str, list[SchemaFile]]:
    groups: dict[str, list[SchemaFile]] = defaultdict(list)
    for f in FILES:
        groups[f.name].append(f)
    return groups


PAIRS = [(old, new) for files in _by_name().values() for old, new in itertools.pairwise(files)]


# ---------------------------------------------------------------------------
# Generic resolution check: write every branch with the old schema, read with the new.
# ---------------------------------------------------------------------------


def _plain(schema: Any) -> Any:
    """Schema without logical types, so values compare as written (ints, not datetimes)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def _named(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named type in ``schema`` by full name (our schemas use full names)."""
    if isinstance(schema, list):
        for s in schema:
            _named(s, out)
    elif isinstance(schema, dict):
        t = schema.get("type")
        if t in ("record", "error", "enum", "fixed"):
            out[schema["name"]] = schema
        if t in ("record", "error"):
            for f in schema["fields"]:
                _named(f["type"], out)
        elif t == "array":
            _named(schema["items"], out)
        elif t == "map":
            _named(schema["values"], out)
        elif isinstance(t, dict | list):
            _named(t, out)
    return out


_PRIMITIVE_SAMPLES = {
    "null": None,
    "boolean": True,
    "int": -7,
    "long": 2**40,
    "float": 1.5,
    "double": 2.25,
    "bytes": b"\x00\xff",
    "string": "sé𝄞",
}


def _sample(t: Any, named: dict[str, Any], pick: int, force: dict[str, str]) -> Any:
    """A datum for type ``t``; unions take branch ``pick`` (0 or -1), or a forced name."""
    if isinstance(t, str):
        if t in _PRIMITIVE_SAMPLES:
            return _PRIMITIVE_SAMPLES[t]
        return _sample(named[t], named, pick, force)
    if isinstance(t, list):
        key = id(t)
        branch = next(b for b in t if _name(b) == force[str(key)]) if str(key) in force else t[pick]
        value = _sample(branch, named, pick, force)
        return (_name(branch), value) if _is_named(branch, named) else value
    kind = t["type"]
    if kind in ("record", "error"):
        return {f["name"]: _sample(f["type"], named, pick, force) for f in t["fields"]}
    if kind == "enum":
        return t["symbols"][pick]
    if kind == "fixed":
        return b"\x01" * t["size"]
    if kind == "array":
        return [_sample(t["items"], named, pick, force)]
    if kind == "map":
        return {"k": _sample(t["values"], named, pick, force)}
    return _sample(kind, named, pick, force)


def _name(t: Any) -> str:
    return t["name"] if isinstance(t, dict) and "name" in t else (t if isinstance(t, str) else "")


def _is_named(t: Any, named: dict[str, Any]) -> bool:
    return (isinstance(t, dict) and t.get("type") in ("record", "error", "enum", "fixed")) or (
        isinstance(t, str) and t in named
    )


def _unions_of_records(schema: Any) -> list[list[Any]]:
    """Unions with several named branches (the payload union): each branch is exercised."""
    found: list[list[Any]] = []

    def walk(t: Any) -> None:
        if isinstance(t, list):
            if sum(isinstance(b, dict) and "name" in b for b in t) > 1:
                found.append(t)
            for b in t:
                walk(b)
        elif isinstance(t, dict):
            for f in t.get("fields", []):
                walk(f["type"])
            for k in ("items", "values"):
                if k in t:
                    walk(t[k])

    walk(schema)
    return found


def _check_resolved(written: Any, read: Any, old_t: Any, new_t: Any, named_old, named_new) -> None:
    """``read`` is ``written`` seen through the new schema: same values, defaults for new fields."""
    if isinstance(old_t, str) and old_t in named_old:
        old_t = named_old[old_t]
    if isinstance(new_t, str) and new_t in named_new:
        new_t = named_new[new_t]
    if isinstance(written, tuple):  # union of named types, tuple notation on both sides
        name, w = written
        assert read[0] == name, f"union branch {name} read back as {read[0]}"
        old_b = next(b for b in old_t if _name(b) == name)
        new_b = next(b for b in new_t if _name(b) == name)
        _check_resolved(w, read[1], old_b, new_b, named_old, named_new)
        return
    if isinstance(new_t, dict) and new_t.get("type") in ("record", "error"):
        old_fields = {f["name"]: f["type"] for f in old_t["fields"]}
        for f in new_t["fields"]:
            if f["name"] in old_fields:
                _check_resolved(
                    written[f["name"]],
                    read[f["name"]],
                    old_fields[f["name"]],
                    f["type"],
                    named_old,
                    named_new,
                )
            else:
                assert read[f["name"]] == f["default"], f"new field {f['name']} lacks its default"
        return
    if isinstance(new_t, list) and isinstance(read, tuple):
        read = read[1]
    assert read == written


def assert_resolves(old: dict[str, Any], new: dict[str, Any]) -> int:
    """Write data of every branch/null-ness with ``old``, read with ``new``; return #cases.

    fastavro resolves lazily (only the branches it meets), hence one datum per branch of
    every union of records, each in an all-first-branch and an all-last-branch variant.
    """
    old, new = _plain(old), _plain(new)
    named_old, named_new = _named(old, {}), _named(new, {})
    w, r = parse_schema(copy.deepcopy(old)), parse_schema(copy.deepcopy(new))
    forcings: list[dict[str, str]] = [{}]
    for union in _unions_of_records(old):
        forcings += [{str(id(union)): _name(b)} for b in union]
    cases = 0
    for force in forcings:
        for pick in (0, -1):
            datum = _sample(old, named_old, pick, force)
            buf = BytesIO()
            schemaless_writer(buf, w, datum)
            buf.seek(0)
            read = schemaless_reader(buf, w, r, return_record_name=True)
            _check_resolved(datum, read, old, new, named_old, named_new)
            cases += 1
    return cases


# ---------------------------------------------------------------------------
# The real versions in avro/
# ---------------------------------------------------------------------------


def test_every_schema_has_contiguous_versions_from_1() -> None:
    groups = _by_name()
    assert ENVELOPE_NAME in groups
    for name, files in groups.items():
        assert [f.version for f in files] == list(range(1, len(files) + 1)), name


def test_released_fingerprints_are_pinned() -> None:
    for f in ENVELOPES:
        key = (f.name, f.version)
        assert key in RELEASED, (
            f"{f.path.name} is not pinned: when releasing it, add "
            f"{key!r}: {f.fingerprint.hex()!r} to RELEASED"
        )
        assert f.fingerprint.hex() == RELEASED[key], (
            f"{f.path.name} was edited after release "
            "(never edit a released schema; add a new version)"
        )


def test_each_version_resolves_against_its_successor() -> None:
    """Every consecutive pair in avro/ (none while only v1 exists; the synthetic tests
    below exercise the same ``assert_resolves``)."""
    for old, new in PAIRS:
        try:
            assert_resolves(old.schema, new.schema)
        except Exception as exc:
            pytest.fail(f"{old.path.name} data is not readable with {new.path.name}: {exc}")


def _branches(schema: dict[str, Any]) -> int:
    return len(next(f for f in schema["fields"] if f["name"] == "payload")["type"])


def test_each_version_resolves_against_itself() -> None:
    for f in ENVELOPES:
        assert assert_resolves(f.schema, f.schema) >= 2 * (_branches(f.schema) + 1)


# ---------------------------------------------------------------------------
# Synthetic successors prove the machinery (built here, not committed to avro/)
# ---------------------------------------------------------------------------


def _newest() -> dict[str, Any]:
    return copy.deepcopy([f for f in FILES if f.name == ENVELOPE_NAME][-1].schema)


def _payload_union(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return next(f["type"] for f in schema["fields"] if f["name"] == "payload")


def _branch(schema: dict[str, Any], short: str) -> dict[str, Any]:
    return next(b for b in _payload_union(schema) if b["name"] == f"keel.{short}")


def test_synthetic_compatible_successor_resolves() -> None:
    new = _newest()
    new["fields"].append({"name": "tenant_id", "type": ["null", "string"], "default": None})
    _branch(new, "TimerFired")["fields"].append({"name": "priority", "type": "int", "default": 3})
    _branch(new, "DeadLetter")["fields"].append(
        {"name": "headers_json", "type": "string", "default": "{}"}
    )
    _branch(new, "StateEntered")["fields"][1]["type"] = "long"  # visit: int -> long promotion
    _payload_union(new).insert(
        3, {"type": "record", "name": "keel.Frobnicated", "fields": [{"name": "x", "type": "int"}]}
    )
    assert assert_resolves(_newest(), new) == 2 * (len(PAYLOAD_TYPES) + 1)


def test_synthetic_field_without_default_fails_clearly() -> None:
    new = _newest()
    _branch(new, "TimerFired")["fields"].append({"name": "owner", "type": "string"})
    with pytest.raises(
        SchemaResolutionError,
        match=re.escape("No default value for field owner in keel.TimerFired"),
    ):
        assert_resolves(_newest(), new)


def test_synthetic_removed_branch_fails() -> None:
    new = _newest()
    union = _payload_union(new)
    union.remove(_branch(new, "DeadLetter"))
    with pytest.raises(SchemaResolutionError, match="schema mismatch"):
        assert_resolves(_newest(), new)


def test_synthetic_narrowed_type_fails() -> None:
    new = _newest()
    _branch(new, "WorkflowSnapshot")["fields"][1]["type"] = "int"  # events_offset long -> int
    with pytest.raises(SchemaResolutionError):
        assert_resolves(_newest(), new)


# ---------------------------------------------------------------------------
# The newest schema and the message catalogue cover each other exactly
# ---------------------------------------------------------------------------

_ALLOWED = {
    "str": ("string",),
    "int": ("int", "long"),
    "int | None": (["null", "int"], ["null", "long"]),
    "bytes | None": (["null", "bytes"],),
    "str | None": (["null", "string"],),
    "bool": ("boolean",),
}


def _compatible(annotation: Any, avro_type: Any) -> bool:
    if isinstance(avro_type, dict) and "logicalType" in avro_type:
        avro_type = avro_type["type"]
    return avro_type in _ALLOWED.get(str(annotation), ())


def test_newest_schema_covers_exactly_the_payload_types() -> None:
    branches = {b["name"]: b for b in _payload_union(_newest())}
    assert sorted(n.removeprefix("keel.") for n in branches) == sorted(PAYLOAD_TYPES)
    for short, cls in PAYLOAD_TYPES.items():
        record = branches[f"keel.{short}"]
        typed = TYPED_FIELDS.get(short, ("",))[0]  # filled by the codec, not a class field
        avro_fields = [(f["name"], f["type"]) for f in record["fields"] if f["name"] != typed]
        py_fields = [(f.name, f.type) for f in dataclasses.fields(cls)]
        assert [n for n, _ in avro_fields] == [n for n, _ in py_fields], short
        for (name, avro_type), (_, annotation) in zip(avro_fields, py_fields, strict=True):
            assert _compatible(annotation, avro_type), (
                f"{short}.{name}: {annotation} vs {avro_type}"
            )


def test_newest_schema_envelope_matches_dataclass() -> None:
    schema = _newest()
    avro_fields = {f["name"]: f for f in schema["fields"]}
    py_fields = dataclasses.fields(Envelope)
    assert list(avro_fields) == [f.name for f in py_fields]
    for f in py_fields:
        if f.name == "payload":
            continue
        assert _compatible(f.type, avro_fields[f.name]["type"]), f.name
        if f.default is not dataclasses.MISSING:
            assert avro_fields[f.name].get("default", "MISSING") == f.default, f.name
    assert avro_fields["recorded_at"]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert avro_fields["seq"]["type"] == "long"
