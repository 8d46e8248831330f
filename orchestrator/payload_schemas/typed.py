"""Typed payloads on the wire: JSON data as Avro single-object bytes, and back.

:class:`TypedPayloads` holds every published payload schema (``avro/payloads/``). The
codec asks it to type a value by its binding: the newest published version of the
binding's schema writes it as ``C3 01`` + that version's fingerprint + the Avro body, the
same framing as the envelope, so a reader resolves both with one schema store.

Typing is exact or absent: the JSON must be an object with no key the schema lacks,
each value of the schema's type (a missing key takes the field's default, when it has
one). Anything else (a model changed without a new published version, a sealed value,
data the schema cannot hold) is left untyped: the JSON text in the event still carries
it, so nothing is lost, and :attr:`TypedPayloads.untyped` counts the misses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from io import BytesIO
from typing import Any, cast

import orjson
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from orchestrator.payload_schemas.catalog import Binding, SchemaFileLike

__all__ = ["BindingKey", "TypedPayloads", "TypedValue", "binding_key"]

_MAGIC = b"\xc3\x01"
_HEADER_LEN = 10
_INT64 = (-(2**63), 2**63 - 1)

#: A binding as a plain tuple (slot, workflow, workflow version, activity): the hot path's key.
BindingKey = tuple[str, str, int, str]


def binding_key(b: Binding) -> BindingKey:
    return (str(b.slot), b.workflow, b.version, b.activity)


class _Mismatch(Exception):
    """The value does not fit the schema (it stays untyped)."""


@dataclass(frozen=True)
class TypedValue:
    """A decoded typed payload: the writer's schema name and version, and the value
    resolved to the newest version of that name."""

    fullname: str
    version: int
    value: Any
    #: The writer schema's fingerprint (8 bytes, little-endian), as in the value's header.
    fingerprint: bytes = b""


@dataclass(frozen=True)
class _Writer:
    header: bytes
    parsed: Any
    convert: Callable[[Any], Any]


class TypedPayloads:
    """The published payload schemas of one schema directory (built once per codec)."""

    def __init__(self, files: Iterable[SchemaFileLike]) -> None:
        newest: dict[str, SchemaFileLike] = {}
        self._versions: dict[bytes, tuple[str, int, Any]] = {}
        for f in files:
            if Binding.of(f.schema) is None:
                continue
            self._versions[f.fingerprint] = (f.name, f.version, parse_schema(f.schema))
            if f.name not in newest or newest[f.name].version < f.version:
                newest[f.name] = f
        self._newest_parsed = {n: self._versions[f.fingerprint][2] for n, f in newest.items()}
        self._names = {fp: name for fp, (name, _, _) in self._versions.items()}
        self._writers: dict[BindingKey, _Writer] = {}
        for f in newest.values():
            binding = Binding.of(f.schema)
            assert binding is not None
            self._writers[binding_key(binding)] = _Writer(
                _MAGIC + f.fingerprint, self._newest_parsed[f.name], _converter(f.schema)
            )
        #: Values offered for a published binding that did not fit its schema.
        self.untyped = 0

    def __len__(self) -> int:
        return len(self._versions)

    def fullname(self, key: BindingKey) -> str | None:
        """The name of the schema that types ``key``'s values (None: none published)."""
        writer = self._writers.get(key)
        return None if writer is None else self._names[writer.header[2:]]

    def encode(self, key: BindingKey | None, json_text: str) -> bytes | None:
        """``json_text`` typed by the binding's newest schema; None when unbound or unfit."""
        if key is None:
            return None
        writer = self._writers.get(key)
        if writer is None or not json_text:
            return None
        try:
            datum = writer.convert(_loads(json_text))
            out = BytesIO()
            out.write(writer.header)
            schemaless_writer(out, writer.parsed, datum)
        except (_Mismatch, ValueError, TypeError, RecursionError):
            self.untyped += 1
            return None
        return out.getvalue()

    def decode(self, data: bytes) -> TypedValue:
        """A typed payload resolved to the newest version of its schema's name; ValueError
        for a bad header, an unknown fingerprint or a corrupt body."""
        if len(data) < _HEADER_LEN or data[:2] != _MAGIC:
            raise ValueError("not an Avro single-object encoded payload")
        fp = bytes(data[2:_HEADER_LEN])
        found = self._versions.get(fp)
        if found is None:
            raise ValueError(f"unknown payload schema fingerprint {fp.hex()}")
        name, version, writer = found
        reader = self._newest_parsed[name]
        buf = BytesIO(data)
        buf.seek(_HEADER_LEN)
        value = schemaless_reader(buf, writer, None if reader is writer else reader)
        if buf.tell() != len(data):
            raise ValueError(f"{len(data) - buf.tell()} trailing bytes after the payload")
        return TypedValue(name, version, value, fp)


def _loads(text: str) -> Any:
    """orjson, or the standard library for what orjson refuses (integers past 64 bits)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


# ---------------------------------------------------------------------------
# JSON value -> Avro datum, strictly (compiled once per schema)
# ---------------------------------------------------------------------------


def _converter(schema: Any) -> Callable[[Any], Any]:
    named: dict[str, Callable[[Any], Any]] = {}
    return _compile(schema, named, "")


def _compile(schema: Any, named: dict[str, Callable[[Any], Any]], ns: str) -> Callable[[Any], Any]:
    if isinstance(schema, str):
        prim = _PRIMS.get(schema)
        if prim is not None:
            return prim
        full = schema if "." in schema else f"{ns}.{schema}"
        return lambda v: named[full](v)  # defined elsewhere in the schema (or recursive)
    if isinstance(schema, list):
        return _union([_compile(s, named, ns) for s in schema], schema)
    kind = schema["type"]
    if kind in ("record", "enum"):
        space = schema.get("namespace", ns)
        full = schema["name"] if "." in schema["name"] else f"{space}.{schema['name']}"
        conv = _record(schema, named, space) if kind == "record" else _enum(schema)
        named[full] = conv
        return conv
    if kind == "array":
        item = _compile(schema["items"], named, ns)
        return lambda v: [item(x) for x in _expect(v, list)]
    if kind == "map":
        val = _compile(schema["values"], named, ns)
        return lambda v: {_expect(k, str): val(x) for k, x in _expect(v, dict).items()}
    return _compile(kind, named, ns)  # a primitive with properties


def _expect(v: Any, kind: type) -> Any:
    if not isinstance(v, kind):
        raise _Mismatch
    return v


def _long(v: Any) -> int:
    if type(v) is not int or not _INT64[0] <= v <= _INT64[1]:
        raise _Mismatch
    return v


def _double(v: Any) -> float:
    if type(v) not in (int, float):
        raise _Mismatch
    return float(v)


def _boolean(v: Any) -> bool:
    if type(v) is not bool:
        raise _Mismatch
    return v


def _null(v: Any) -> None:
    if v is not None:
        raise _Mismatch


_PRIMS: dict[str, Callable[[Any], Any]] = {
    "string": lambda v: _expect(v, str),
    "long": _long,
    "int": _long,
    "double": _double,
    "float": _double,
    "boolean": _boolean,
    "null": _null,
}


def _union(branches: list[Callable[[Any], Any]], schema: list[Any]) -> Callable[[Any], Any]:
    if len(branches) != 2 or "null" not in schema:
        raise ValueError(f"payload schemas use X | None unions only, not {schema!r}")
    other = branches[1 - schema.index("null")]
    return lambda v: None if v is None else other(v)


def _record(
    schema: dict[str, Any], named: dict[str, Callable[[Any], Any]], ns: str
) -> Callable[[Any], Any]:
    fields = [(f["name"], _compile(f["type"], named, ns), f) for f in schema["fields"]]
    names = frozenset(n for n, _, _ in fields)

    def convert(v: Any) -> dict[str, Any]:
        if not isinstance(v, dict) or not names.issuperset(v):
            raise _Mismatch
        out = {}
        for name, conv, f in fields:
            if name in v:
                out[name] = conv(v[name])
            elif "default" in f:
                out[name] = conv(f["default"])
            else:
                raise _Mismatch
        return out

    return convert


def _enum(schema: dict[str, Any]) -> Callable[[Any], Any]:
    symbols = frozenset(schema["symbols"])

    def convert(v: Any) -> str:
        if v not in symbols:
            raise _Mismatch
        return cast("str", v)

    return convert
