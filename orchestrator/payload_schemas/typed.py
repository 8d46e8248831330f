"""Typed payloads on the wire: JSON data as Avro single-object bytes, and back.

:class:`TypedPayloads` holds every published payload schema (``avro/payloads/``). The
codec asks it to type a value by its binding: the newest published version of the
binding's schema writes it as ``C3 01`` + that version's fingerprint + the Avro body, the
same framing as the envelope, so a reader resolves both with one schema store.

Typing is exact or absent: the JSON must be an object with no key the schema lacks,
each value of the schema's type (a missing key takes the field's default, when it has
one). Anything else (a model changed without a new published version, a sealed value,
data the schema cannot hold) is left untyped: the JSON text in the event still carries
it, so nothing is lost, and :attr:`TypedPayloads.untyped` counts the misses. A typed
value larger than :data:`MAX_TYPED_BYTES` is left untyped too (and counted), so that
typing never makes an event too large for its record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import orjson
from fastavro import parse_schema, schemaless_reader

from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES
from orchestrator.payload_schemas.binary import Mismatch, Write, compile_writer
from orchestrator.payload_schemas.catalog import Binding, SchemaFileLike

__all__ = ["MAX_TYPED_BYTES", "BindingKey", "TypedPayloads", "TypedValue", "binding_key"]

#: The largest typed payload: one JSON value's limit, so an event typed stays well within
#: a record (docs/limits.md); a larger one stays JSON only.
MAX_TYPED_BYTES = MAX_PAYLOAD_BYTES
_MAGIC = b"\xc3\x01"
_HEADER_LEN = 10

#: A binding as a plain tuple (slot, workflow, workflow version, activity): the hot path's key.
BindingKey = tuple[str, str, int, str]


def binding_key(b: Binding) -> BindingKey:
    """The hot path's key of ``b``."""
    return (str(b.slot), b.workflow, b.version, b.activity)


@dataclass(frozen=True)
class TypedValue:
    """A decoded typed payload: the writer's schema name and version, and the value
    resolved to the newest version of that name."""

    fullname: str
    version: int
    value: Any
    #: The writer schema's fingerprint (8 bytes, little-endian), as in the value's header.
    fingerprint: bytes = b""


class _Writer:
    """One binding's writer, compiled on first use (a process types few of them)."""

    __slots__ = ("_write", "header", "schema")

    def __init__(self, fingerprint: bytes, schema: dict[str, Any]) -> None:
        self.header = _MAGIC + fingerprint
        self.schema = schema
        self._write: Write | None = None

    def write(self, value: Any, out: bytearray) -> None:
        if self._write is None:
            self._write = compile_writer(self.schema)
        self._write(value, out)


class TypedPayloads:
    """The published payload schemas of one schema directory (built once per codec)."""

    def __init__(self, files: Iterable[SchemaFileLike]) -> None:
        newest: dict[str, SchemaFileLike] = {}
        #: fingerprint -> (name, version, schema as written)
        self._versions: dict[bytes, tuple[str, int, dict[str, Any]]] = {}
        for f in files:
            if Binding.of(f.schema) is None:
                continue
            self._versions[f.fingerprint] = (f.name, f.version, f.schema)
            if f.name not in newest or newest[f.name].version < f.version:
                newest[f.name] = f
        self._newest = {name: f.fingerprint for name, f in newest.items()}
        self._writers: dict[BindingKey, _Writer] = {}
        for f in newest.values():
            binding = Binding.of(f.schema)
            assert binding is not None
            self._writers[binding_key(binding)] = _Writer(f.fingerprint, f.schema)
        self._parsed: dict[bytes, Any] = {}
        #: Values offered for a published binding that did not fit its schema.
        self.untyped = 0

    def __len__(self) -> int:
        return len(self._versions)

    def fullname(self, key: BindingKey) -> str | None:
        """The name of the schema that types ``key``'s values (None: none published)."""
        writer = self._writers.get(key)
        return None if writer is None else self._versions[writer.header[2:]][0]

    def encode(self, key: BindingKey | None, json_text: str) -> bytes | None:
        """``json_text`` typed by the binding's newest schema; None when unbound or unfit."""
        if key is None:
            return None
        writer = self._writers.get(key)
        if writer is None or not json_text:
            return None
        out = bytearray(writer.header)
        try:
            writer.write(_loads(json_text), out)
        except (Mismatch, ValueError, TypeError, RecursionError):
            self.untyped += 1
            return None
        if len(out) > MAX_TYPED_BYTES:  # e.g. many small floats: 8 bytes each in Avro
            self.untyped += 1
            return None
        return bytes(out)

    def _parse(self, fp: bytes) -> Any:
        parsed = self._parsed.get(fp)
        if parsed is None:
            parsed = self._parsed[fp] = parse_schema(self._versions[fp][2])
        return parsed

    def decode(self, data: bytes) -> TypedValue:
        """A typed payload resolved to the newest version of its schema's name; ValueError
        for a bad header, an unknown fingerprint or a corrupt body."""
        if len(data) < _HEADER_LEN or data[:2] != _MAGIC:
            raise ValueError("not an Avro single-object encoded payload")
        fp = bytes(data[2:_HEADER_LEN])
        found = self._versions.get(fp)
        if found is None:
            raise ValueError(f"unknown payload schema fingerprint {fp.hex()}")
        name, version, _ = found
        newest = self._newest[name]
        writer = self._parse(fp)
        reader = None if newest == fp else self._parse(newest)
        buf = BytesIO(data)
        buf.seek(_HEADER_LEN)
        value = schemaless_reader(buf, writer, reader)
        if buf.tell() != len(data):
            raise ValueError(f"{len(data) - buf.tell()} trailing bytes after the payload")
        return TypedValue(name, version, value, fp)


def _loads(text: str) -> Any:
    """orjson, or the standard library for what orjson refuses (integers past 64 bits)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
