"""Keel's wire format: Avro single-object encoding of :class:`Envelope`.

Every record on every Keel topic is ``C3 01`` + the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form + the
Avro binary datum (Avro spec, "Single-object encoding"). The fingerprint lets a
reader find the exact writer schema among all versions in ``avro/`` and resolve
it to the current one, so events written years ago stay readable.

Schemas are parsed once per :class:`Codec`; the hot paths (:meth:`Codec.encode`,
:meth:`Codec.decode`) only do dictionary building and fastavro's C reader/writer.

Since v8 a workflow's data also travels typed: next to a ``*_json`` field, its value
single-object encoded with the payload schema published for it (``avro/payloads/``,
:mod:`orchestrator.payload_schemas`, docs/event-log.md). The codec writes it; the domain
never reads it (:meth:`Codec.typed_values` does, for other readers and checks).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import BytesIO
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import to_parsing_canonical_form

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import KeelError
from orchestrator.domain.model.messages import (
    PAYLOAD_TYPES,
    ActivityCompleted,
    Envelope,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.payload_schemas import BindingKey, Slot, TypedPayloads, TypedValue
from orchestrator.payload_schemas.codec_fast import Unsupported, compile_schema

__all__ = [
    "ENVELOPE_NAME",
    "MAGIC",
    "TYPED_FIELDS",
    "Codec",
    "DecodeError",
    "SchemaFile",
    "codec_for",
    "default_schema_dir",
    "load_schema_files",
    "rabin_fingerprint",
    "schema_fingerprint",
]

#: Single-object encoding marker (Avro spec).
MAGIC = b"\xc3\x01"
_HEADER_LEN = 10  # marker (2) + fingerprint (8)
ENVELOPE_NAME = "keel.Envelope"
_FILE_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")


class DecodeError(KeelError, ValueError):
    """A record cannot be decoded; the message is a one-line reason (for dead letters)."""


#: Envelope fields (v8+) the codec fills, not the dataclasses: payload type -> (the typed
#: field, the JSON field it types). The JSON field stays the value the domain reads.
TYPED_FIELDS: dict[str, tuple[str, str]] = {
    "WorkflowStarted": ("input_avro", "input_json"),
    "ActivityScheduled": ("input_avro", "input_json"),
    "ActivityCompleted": ("result_avro", "result_json"),
    "WorkflowCompleted": ("output_avro", "output_json"),
    "WorkflowContinuedAsNew": ("input_avro", "input_json"),
}
#: The binding of a payload's typed value, where the payload itself names it; the others
#: need the run's definition, which a caller passes to :meth:`Codec.encode` as ``hint``.
_BINDING_OF: dict[str, Callable[[Any], BindingKey]] = {
    "WorkflowStarted": lambda p: (Slot.INPUT, p.name, p.version, ""),
    "ActivityScheduled": lambda p: (Slot.INPUT, "", 0, p.activity_type),
}


# ---------------------------------------------------------------------------
# CRC-64-AVRO (Rabin) fingerprint, exactly as in the Avro specification.
# ---------------------------------------------------------------------------

_EMPTY64 = 0xC15D213AA4D7A795


def _make_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return tuple(table)


_FP_TABLE = _make_table()


def rabin_fingerprint(data: bytes) -> int:
    """CRC-64-AVRO of ``data`` (the spec's ``fingerprint64``); empty input gives the seed."""
    fp = _EMPTY64
    table = _FP_TABLE
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def schema_fingerprint(schema: dict[str, Any] | list[Any] | str) -> bytes:
    """The 8 little-endian fingerprint bytes of a schema's Parsing Canonical Form.

    Non-canonical attributes (doc, logicalType, defaults) do not change it, which
    is why the header identifies the *shape* of the writer's data.
    """
    pcf = to_parsing_canonical_form(schema)
    return rabin_fingerprint(pcf.encode("utf-8")).to_bytes(8, "little")


# ---------------------------------------------------------------------------
# Schema files
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaFile:
    """One immutable schema version: ``<fullname>.v<version>.avsc``."""

    name: str
    version: int
    path: Path
    schema: dict[str, Any]  # the JSON as written (not parsed by fastavro)
    fingerprint: bytes


def default_schema_dir() -> Path:
    """The repo's ``avro/`` next to this package, else ``orchestrator/_avro`` (wheel installs)."""
    package = Path(__file__).resolve().parents[1]  # orchestrator/
    repo = package.parent / "avro"
    if repo.is_dir() and any(repo.glob("*.avsc")):
        return repo
    return package / "_avro"


def load_schema_files(schema_dir: Path | str | None = None) -> list[SchemaFile]:
    """Every ``*.avsc`` under ``schema_dir``, sorted by (name, version).

    Strict on purpose: a misnamed file, a name/content mismatch or a duplicate
    version is a packaging mistake that would silently break old data, so it raises.
    """
    root = Path(schema_dir) if schema_dir is not None else default_schema_dir()
    files: list[SchemaFile] = []
    seen: dict[tuple[str, int], Path] = {}
    for path in sorted(root.rglob("*.avsc")):
        m = _FILE_RE.match(path.name)
        if m is None:
            raise ValueError(f"schema file {path} is not named <fullname>.v<N>.avsc")
        schema = json.loads(path.read_text(encoding="utf-8"))
        name, version = m["name"], int(m["version"])
        if not isinstance(schema, dict) or _fullname(schema) != name:
            raise ValueError(f"schema file {path} does not define the named type {name}")
        if (name, version) in seen:
            raise ValueError(
                f"schema {name} v{version} defined twice: {seen[name, version]}, {path}"
            )
        seen[name, version] = path
        files.append(SchemaFile(name, version, path, schema, schema_fingerprint(schema)))
    files.sort(key=lambda f: (f.name, f.version))
    return files


def _with_payload_dirs(
    bundled: list[SchemaFile], envelope: str, payload_dirs: Sequence[Path | str]
) -> list[SchemaFile]:
    """Keel's envelope versions plus the payload schemas of ``payload_dirs`` (an
    application's ``keel schemas export``), instead of the bundled examples' payload schemas.

    An export holds copies of the envelope's versions: they are Keel's to define, so they
    are skipped (a copy that differs from Keel's own is a mistake worth an error). The same
    payload version in two folders must be the same schema.
    """
    keel = {(f.name, f.version): f for f in bundled if f.name == envelope}
    merged: dict[tuple[str, int], SchemaFile] = dict(keel)
    for folder in payload_dirs:
        if not Path(folder).is_dir():
            raise ValueError(f"schema folder {folder} (KEEL_SCHEMA_DIRS) is not a directory")
        for f in load_schema_files(folder):
            seen = merged.get((f.name, f.version))
            if seen is None:
                if f.name != envelope:
                    merged[f.name, f.version] = f
            elif seen.fingerprint != f.fingerprint:
                raise ValueError(
                    f"{f.path} and {seen.path} both define {f.name} v{f.version}, differently"
                )
    return sorted(merged.values(), key=lambda f: (f.name, f.version))


def _fullname(schema: dict[str, Any]) -> str:
    name = str(schema.get("name", ""))
    ns = schema.get("namespace")
    return f"{ns}.{name}" if ns and "." not in name else name


def _strip_logical_types(schema: Any) -> Any:
    """A copy without ``logicalType``: Keel keeps times as epoch-millis ints.

    fastavro would otherwise turn ``timestamp-millis`` into ``datetime`` on every
    read (slow, and not the domain's clock type). The canonical form, hence the
    fingerprint, is unaffected.
    """
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(v) for v in schema]
    return schema


# ---------------------------------------------------------------------------
# Codec
# ---------------------------------------------------------------------------


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` on one line, truncated: fastavro may embed whole schemas in errors."""
    detail = " ".join(str(exc).split())
    if len(detail) > limit:
        detail = detail[: limit - 3] + "..."
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _make_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """attrgetter that always returns a tuple (attrgetter of one name returns a scalar)."""
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return attrgetter(*names)


class Codec:
    """Encodes with the newest ``keel.Envelope`` version; decodes any known version.

    Build one per process (see :func:`codec_for`): construction parses every
    schema file, which is far too slow to do per record.
    """

    def __init__(
        self,
        schema_dir: Path | str | None = None,
        name: str = ENVELOPE_NAME,
        payload_dirs: Sequence[Path | str] = (),
    ) -> None:
        every = load_schema_files(schema_dir)
        if payload_dirs:
            every = _with_payload_dirs(every, name, payload_dirs)
        files = [f for f in every if f.name == name]
        if not files:
            where = schema_dir if schema_dir is not None else default_schema_dir()
            raise ValueError(f"no {name}.v<N>.avsc schema found in {where}")
        self.files: tuple[SchemaFile, ...] = tuple(files)
        self._parsed: dict[bytes, dict[str, Any]] = {}
        self._version_by_fp: dict[bytes, int] = {}
        for f in files:
            if f.fingerprint in self._parsed:
                other = self._version_by_fp[f.fingerprint]
                raise ValueError(
                    f"{f.path.name} has the same canonical form as v{other}; "
                    "a new version must change the schema"
                )
            parsed = parse_schema(_strip_logical_types(f.schema))
            self._parsed[f.fingerprint] = cast("dict[str, Any]", parsed)
            self._version_by_fp[f.fingerprint] = f.version
        current = files[-1]
        self.version: int = current.version
        #: Fingerprint of the current writer schema (8 bytes, little-endian).
        self.fingerprint: bytes = current.fingerprint
        self._schema = self._parsed[current.fingerprint]
        self._header = MAGIC + current.fingerprint

        # Per payload class: (union branch fullname, field names, getter) for encode;
        # per branch fullname: (class, field names) for decode.
        branches = self._payload_branches(self._schema)
        #: The published payload schemas: typed values are written with these.
        self.payloads = TypedPayloads(every)
        self._enc: dict[type, tuple[str, tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}
        self._dec: dict[str, tuple[type, tuple[str, ...]]] = {}
        self._typed: dict[type, tuple[str, Callable[[Any, Any], bytes | None]]] = {}
        for short, cls in PAYLOAD_TYPES.items():
            full = branches.get(short)
            if full is None:
                continue  # catalogue ahead of schemas: encode() will refuse this class
            names = tuple(f.name for f in dataclasses.fields(cls))
            self._enc[cls] = (full, names, _make_getter(names))
            self._dec[full] = (cls, names)
            typed = TYPED_FIELDS.get(short)
            if typed is not None and typed[0] in self._branch_fields(full):
                self._typed[cls] = (typed[0], self._typer(typed[1], _BINDING_OF.get(short)))
        # The hot path: writers and a reader compiled from the current schema
        # (``codec_fast``); fastavro stays the reference and reads older versions.
        compiled = compile_schema(
            self._schema,
            self._header,
            {full: cls for full, (cls, _) in self._dec.items()},
            Envelope,
            {self._enc[cls][0]: {field: fn} for cls, (field, fn) in self._typed.items()},
        )
        self._writers = compiled.writers
        self._read = compiled.read

    def _typer(
        self, json_field: str, binding_of: Callable[[Any], BindingKey] | None
    ) -> Callable[[Any, Any], bytes | None]:
        """``fn(payload, hint)``: the payload's JSON field as a typed value, or None."""
        get = attrgetter(json_field)
        encode = self.payloads.encode

        def typed(p: Any, hint: BindingKey | None) -> bytes | None:
            key = hint if hint is not None else binding_of(p) if binding_of else None
            return None if key is None else encode(key, get(p))

        return typed

    @staticmethod
    def hint(state: WorkflowState, payload: Any) -> BindingKey | None:
        """The binding of ``payload``'s typed value that only its run knows: an activity's
        result (its type), a run's output or continued input (its definition)."""
        kind = type(payload)
        if kind is ActivityCompleted:
            act = state.activities.get(payload.activity_id)
            return None if act is None else (Slot.RESULT, "", 0, act.activity_type)
        if kind is WorkflowCompleted:
            return (Slot.OUTPUT, state.name, state.version, "")
        if kind is WorkflowContinuedAsNew:
            return (Slot.INPUT, state.name, state.version, "")
        return None

    def _branch_fields(self, full: str) -> set[str]:
        for fld in self._schema["fields"]:
            if fld["name"] == "payload":
                for b in fld["type"]:
                    if b["name"] == full:
                        return {f["name"] for f in b["fields"]}
        return set()

    @staticmethod
    def _payload_branches(parsed: dict[str, Any]) -> dict[str, str]:
        for fld in parsed["fields"]:
            if fld["name"] == "payload":
                return {b["name"].rsplit(".", 1)[-1]: b["name"] for b in fld["type"]}
        raise ValueError("envelope schema has no payload field")

    @property
    def schema(self) -> dict[str, Any]:
        """The current (reader and writer) schema, parsed by fastavro."""
        return self._schema

    def known_fingerprints(self) -> dict[bytes, int]:
        """Fingerprint -> schema version, for every version this codec can read."""
        return dict(self._version_by_fp)

    def encode(self, env: Envelope[Any], hint: BindingKey | None = None) -> bytes:
        """Single-object encoding of ``env`` with the current schema.

        A payload with a typed field (:data:`TYPED_FIELDS`) also carries its JSON value as
        a typed payload when a published schema binds it: the payload names the binding
        (a start's workflow, an activity's type) or ``hint`` does (the run's definition)."""
        payload = env.payload
        write = self._writers.get(type(payload))
        if write is not None and env.type == payload.__class__.__name__:
            return write(env, payload, hint)
        return self.encode_reference(env, hint)

    def encode_reference(self, env: Envelope[Any], hint: BindingKey | None = None) -> bytes:
        """``encode`` through fastavro: the reference the compiled writers are tested against."""
        payload = env.payload
        try:
            full, names, get = self._enc[type(payload)]
        except KeyError:
            raise ValueError(
                f"cannot encode payload of type {type(payload).__name__}: "
                f"not a union branch of {ENVELOPE_NAME} v{self.version}"
            ) from None
        if env.type != payload.__class__.__name__:
            raise ValueError(
                f"envelope type {env.type!r} does not match payload {payload.__class__.__name__}"
            )
        body = dict(zip(names, get(payload), strict=True))
        typed = self._typed.get(type(payload))
        if typed is not None:
            body[typed[0]] = typed[1](payload, hint)
        record = {
            "message_id": env.message_id,
            "workflow_id": env.workflow_id,
            "run_id": env.run_id,
            "seq": env.seq,
            "type": env.type,
            "recorded_at": env.recorded_at,
            "payload": (full, body),
            "causation_id": env.causation_id,
            "correlation_id": env.correlation_id,
            "traceparent": env.traceparent,
        }
        out = BytesIO()
        out.write(self._header)
        schemaless_writer(out, self._schema, record)
        return out.getvalue()

    @staticmethod
    def fingerprint_of(data: bytes | bytearray | memoryview) -> bytes:
        """The writer fingerprint in a single-object-encoded record (validates the header)."""
        if len(data) < _HEADER_LEN:
            raise DecodeError(
                f"too short for single-object encoding: {len(data)} bytes < {_HEADER_LEN}"
            )
        if data[:2] != MAGIC:
            raise DecodeError(f"bad marker: expected c301, got {bytes(data[:2]).hex()}")
        return bytes(data[2:_HEADER_LEN])

    def decode(self, data: bytes | bytearray | memoryview) -> Envelope[Any]:
        """Envelope from single-object-encoded ``data``, resolved to the current schema."""
        fp = self.fingerprint_of(data)
        if fp == self.fingerprint and self._read is not None:
            fast = self._decode_current(data)
            if fast is not None:
                return fast
        return self.decode_reference(data)

    def _decode_current(self, data: bytes | bytearray | memoryview) -> Envelope[Any] | None:
        """The compiled reader of the current schema; None for a branch it does not know."""
        assert self._read is not None
        raw = bytes(data)
        try:
            env, end = self._read(raw, _HEADER_LEN)
        except Unsupported:
            return None
        except IndexError:
            raise DecodeError("corrupt datum: EOFError") from None
        except Exception as exc:  # hostile bytes: any failure is a corrupt datum
            raise DecodeError(f"corrupt datum: {_one_line(exc)}") from exc
        if end != len(raw):
            raise DecodeError(f"corrupt datum: {len(raw) - end} trailing bytes")
        if env.type != env.payload.__class__.__name__:
            full = self._enc[type(env.payload)][0]
            raise DecodeError(f"envelope type {env.type!r} does not match payload {full}")
        return env  # type: ignore[no-any-return]

    def decode_reference(self, data: bytes | bytearray | memoryview) -> Envelope[Any]:
        """``decode`` through fastavro (every known writer version)."""
        fp = self.fingerprint_of(data)
        writer = self._parsed.get(fp)
        if writer is None:
            raise DecodeError(f"unknown writer schema fingerprint {fp.hex()}")
        reader = None if writer is self._schema else self._schema
        buf = BytesIO(data)
        buf.seek(_HEADER_LEN)
        try:
            rec = cast(
                "dict[str, Any]",
                schemaless_reader(buf, writer, reader, return_record_name=True),
            )
        except Exception as exc:  # fastavro raises many types for bad input
            if type(exc).__name__ == "SchemaResolutionError":
                raise DecodeError(
                    f"cannot resolve writer schema {fp.hex()} "
                    f"(v{self._version_by_fp[fp]}) to v{self.version}: {_one_line(exc)}"
                ) from exc
            raise DecodeError(f"corrupt datum: {_one_line(exc)}") from exc
        if buf.tell() != len(data):
            raise DecodeError(f"corrupt datum: {len(data) - buf.tell()} trailing bytes")
        full, body = rec["payload"]
        try:
            cls, names = self._dec[full]
        except KeyError:
            raise DecodeError(f"unknown payload type {full}") from None
        if rec["type"] != cls.__name__:
            raise DecodeError(f"envelope type {rec['type']!r} does not match payload {full}")
        try:
            payload = cls(*[body[n] for n in names])
        except KeyError as exc:
            raise DecodeError(f"payload {full} lacks field {exc.args[0]}") from None
        return Envelope(
            rec["message_id"],
            rec["workflow_id"],
            rec["run_id"],
            rec["seq"],
            rec["type"],
            rec["recorded_at"],
            payload,
            rec["causation_id"],
            rec["correlation_id"],
            rec["traceparent"],
        )

    def typed_values(self, data: bytes | bytearray | memoryview) -> dict[str, TypedValue]:
        """The typed payloads a record carries, by JSON field (``{"input_json": ...}``),
        each resolved to the newest version of its schema; ``{}`` for records before v8.

        For readers and checks, not the hot path: the domain reads the JSON fields."""
        fp = self.fingerprint_of(data)
        writer = self._parsed.get(fp)
        if writer is None:
            raise DecodeError(f"unknown writer schema fingerprint {fp.hex()}")
        buf = BytesIO(data)
        buf.seek(_HEADER_LEN)
        try:
            rec = cast("dict[str, Any]", schemaless_reader(buf, writer, return_record_name=True))
            full, body = rec["payload"]
            typed = TYPED_FIELDS.get(full.rsplit(".", 1)[-1])
            if typed is None or body.get(typed[0]) is None:
                return {}
            return {typed[1]: self.payloads.decode(body[typed[0]])}
        except Exception as exc:  # corrupt bytes, an unknown payload schema
            raise DecodeError(f"typed payload: {_one_line(exc)}") from exc


def codec_for(settings: Settings) -> Codec:
    """A codec of Keel's schemas with the deployment's payload schemas
    (``KEEL_SCHEMA_DIRS``, docs/event-log.md). Parsing them takes ~0.1 s: a process's
    composition root builds one and hands it to each part that encodes or decodes."""
    return Codec(payload_dirs=settings.schema_dirs)
