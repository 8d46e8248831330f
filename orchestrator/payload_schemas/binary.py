"""A JSON value written as Avro binary by a payload schema, checked as it is written.

One writer per schema, built once from closures: a record writes its fields in order, a
missing key writes the field's default, a key the schema lacks or a value of another type
raises :class:`Mismatch`. The bytes are the Avro binary encoding (what fastavro writes for
the same datum; ``tests/unit/payload_schemas/test_typed_payloads.py`` compares them), at a
fraction of fastavro's cost per value on the orchestrator's hot path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from orchestrator.payload_schemas.codec_fast import write_long

__all__ = ["Mismatch", "Write", "compile_writer"]

#: ``write(value, out)``: append ``value``'s Avro binary to ``out`` (Mismatch: it does not fit).
Write = Callable[[Any, bytearray], None]
_INT64 = (-(2**63), 2**63 - 1)
_double = struct.Struct("<d").pack


class Mismatch(Exception):
    """The value does not fit the schema (it stays untyped)."""


def compile_writer(schema: Any) -> Write:
    """The writer of ``schema`` (a payload schema: records, arrays, maps, enums, primitives
    and ``X | None`` unions); ValueError for a shape payload schemas never have."""
    return _compile(schema, {}, "")


def _compile(schema: Any, named: dict[str, Write], ns: str) -> Write:
    if isinstance(schema, str):
        prim = _PRIMITIVES.get(schema)
        if prim is not None:
            return prim
        full = schema if "." in schema else f"{ns}.{schema}"
        return lambda v, out: named[full](v, out)  # defined elsewhere in the schema (or itself)
    if isinstance(schema, list):
        return _union(schema, named, ns)
    kind = schema["type"]
    if kind in ("record", "enum"):
        space = schema.get("namespace", ns)
        full = schema["name"] if "." in schema["name"] else f"{space}.{schema['name']}"
        named[full] = _record(schema, named, space) if kind == "record" else _enum(schema)
        return named[full]
    if kind == "array":
        return _array(_compile(schema["items"], named, ns))
    if kind == "map":
        return _map(_compile(schema["values"], named, ns))
    return _compile(kind, named, ns)  # a primitive with properties


def _string(v: Any, out: bytearray) -> None:
    if type(v) is not str:
        raise Mismatch
    raw = v.encode()
    out += write_long(len(raw))
    out += raw


def _long(v: Any, out: bytearray) -> None:
    if type(v) is not int or not _INT64[0] <= v <= _INT64[1]:
        raise Mismatch
    out += write_long(v)


def _float(v: Any, out: bytearray) -> None:
    if type(v) not in (int, float):
        raise Mismatch
    out += _double(v)


def _boolean(v: Any, out: bytearray) -> None:
    if type(v) is not bool:
        raise Mismatch
    out += b"\x01" if v else b"\x00"


def _null(v: Any, out: bytearray) -> None:
    if v is not None:
        raise Mismatch


_PRIMITIVES: dict[str, Write] = {
    "string": _string,
    "long": _long,
    "double": _float,
    "boolean": _boolean,
    "null": _null,
}


def _union(schema: list[Any], named: dict[str, Write], ns: str) -> Write:
    if len(schema) != 2 or "null" not in schema:
        raise ValueError(f"payload schemas use X | None unions only, not {schema!r}")
    null_at = schema.index("null")
    other = _compile(schema[1 - null_at], named, ns)
    null_b, some_b = (b"\x00", b"\x02") if null_at == 0 else (b"\x02", b"\x00")

    def write(v: Any, out: bytearray) -> None:
        if v is None:
            out += null_b
        else:
            out += some_b
            other(v, out)

    return write


def _array(item: Write) -> Write:
    def write(v: Any, out: bytearray) -> None:
        if type(v) is not list:
            raise Mismatch
        if v:
            out += write_long(len(v))
            for x in v:
                item(x, out)
        out += b"\x00"

    return write


def _map(value: Write) -> Write:
    def write(v: Any, out: bytearray) -> None:
        if type(v) is not dict:
            raise Mismatch
        if v:
            out += write_long(len(v))
            for k, x in v.items():
                _string(k, out)
                value(x, out)
        out += b"\x00"

    return write


def _enum(schema: dict[str, Any]) -> Write:
    index = {s: write_long(i) for i, s in enumerate(schema["symbols"])}

    def write(v: Any, out: bytearray) -> None:
        try:
            out += index[v]
        except (KeyError, TypeError):
            raise Mismatch from None

    return write


def _record(schema: dict[str, Any], named: dict[str, Write], ns: str) -> Write:
    """A record's writer as generated code: primitive fields (nullable or not) inline, the
    others through their writers (the hot path writes small flat records)."""
    scope: dict[str, Any] = {
        "_Mismatch": Mismatch,
        "_MISSING": _MISSING,
        "_long": write_long,
        "_double": _double,
        "_lo": _INT64[0],
        "_hi": _INT64[1],
        "_names": frozenset(f["name"] for f in schema["fields"]),
    }
    lines = [
        "def write(v, out):",
        "    if type(v) is not dict or not _names.issuperset(v):",
        "        raise _Mismatch",
    ]
    for i, f in enumerate(schema["fields"]):
        write = _compile(f["type"], named, ns)
        default = _default_bytes(write, f["default"]) if "default" in f else None
        lines.append(f"    x = v.get({f['name']!r}, _MISSING)")
        lines.append("    if x is _MISSING:")
        if default is None:
            lines.append("        raise _Mismatch")
        else:
            scope[f"_d{i}"] = default
            lines.append(f"        out += _d{i}")
        lines.append("    else:")
        scope[f"_w{i}"] = write
        _field_code(f["type"], i, lines, "        ")
    exec("\n".join(lines), scope)  # source built here from the schema only
    return scope["write"]  # type: ignore[no-any-return]


_MISSING = object()
_INLINE = {
    "string": [
        "if type(x) is not str:",
        "    raise _Mismatch",
        "x = x.encode()",
        "out += _long(len(x))",
        "out += x",
    ],
    "long": [
        "if type(x) is not int or not _lo <= x <= _hi:",
        "    raise _Mismatch",
        "out += _long(x)",
    ],
    "double": [
        "if type(x) is not float and type(x) is not int:",
        "    raise _Mismatch",
        "out += _double(x)",
    ],
    "boolean": [
        "if x is True:",
        "    out += b'\\x01'",
        "elif x is False:",
        "    out += b'\\x00'",
        "else:",
        "    raise _Mismatch",
    ],
}


def _field_code(t: Any, i: int, lines: list[str], indent: str) -> None:
    """Field ``i`` (value ``x``): inline when it is a primitive or a nullable one."""
    if isinstance(t, dict) and t.get("type") in _INLINE:
        t = t["type"]  # a primitive with properties
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        other = t[1 - t.index("null")]
        other = other["type"] if isinstance(other, dict) and other.get("type") in _INLINE else other
        if isinstance(other, str) and other in _INLINE:
            null_b, some_b = (b"\x00", b"\x02") if t[0] == "null" else (b"\x02", b"\x00")
            lines.append(f"{indent}if x is None:")
            lines.append(f"{indent}    out += {null_b!r}")
            lines.append(f"{indent}else:")
            lines.append(f"{indent}    out += {some_b!r}")
            lines.extend(f"{indent}    {code}" for code in _INLINE[other])
            return
    if isinstance(t, str) and t in _INLINE:
        lines.extend(f"{indent}{code}" for code in _INLINE[t])
        return
    lines.append(f"{indent}_w{i}(x, out)")


def _default_bytes(write: Write, default: Any) -> bytes | None:
    """A field default, written once; None when it does not fit (or is of a record type the
    schema defines later): the field is then required."""
    out = bytearray()
    try:
        write(default, out)
    except (Mismatch, KeyError):
        return None
    return bytes(out)
