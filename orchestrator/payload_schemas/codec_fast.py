"""Compiled Avro binary writer and reader for the current ``keel.Envelope`` schema.

fastavro resolves the 45-branch payload union on every record and builds a dict per
record and per payload; on the orchestrator's hot path that was the largest single
cost (git show 6f66b40:docs/performance.md, "Throughput"). Here each payload class gets
one function, generated once from the parsed schema, that writes (or reads) the whole
envelope in schema order: the union branch is a constant, fields are read as attributes. The bytes
are exactly fastavro's (Avro binary encoding is canonical; ``tests/unit/test_codec_fast.py``
compares both for every payload type). Only the shapes Keel's schema uses are compiled
(``boolean``, ``int``, ``long``, ``string``, ``bytes`` and two-branch unions with
``null``); a schema with anything else is not compiled and fastavro does the work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Compiled", "compile_schema"]

#: Zig-zag varints of 0..8191 (strings and small numbers): one lookup, no loop.
_SMALL = tuple(
    bytes([(n << 1) & 0x7F | 0x80, (n << 1) >> 7]) if (n << 1) > 0x7F else bytes([n << 1])
    for n in range(8192)
)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


#: Varints of the large longs written lately: a decision's events, and the decisions of
#: one batch, share their ``recorded_at`` (epoch milliseconds, six bytes to loop over).
_RECENT: dict[int, bytes] = {}
_RECENT_MAX = 1024


def write_long(n: int) -> bytes:
    """Avro ``long``: zig-zag, then base-128 varint (what fastavro writes)."""
    if 0 <= n < 8192:
        return _SMALL[n]
    done = _RECENT.get(n)
    if done is not None:
        return done
    if n < _INT64_MIN or n > _INT64_MAX:
        raise OverflowError(f"{n} does not fit an Avro long")
    z = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    if len(_RECENT) >= _RECENT_MAX:  # a bound, not an LRU: the next batch refills it
        _RECENT.clear()
    done = _RECENT[n] = bytes(out)
    return done


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """The ``long`` at ``pos`` and the position after it (IndexError past the end)."""
    b = data[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise ValueError("varint longer than 10 bytes")
    return (n >> 1) ^ -(n & 1), pos


def read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_long(data, pos)
    end = pos + n
    if n < 0:
        raise ValueError(f"negative length {n}")
    if end > len(data):
        raise EOFError
    return data[pos:end], end


def read_string(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = read_bytes(data, pos)
    return raw.decode("utf-8"), pos


def read_boolean(data: bytes, pos: int) -> tuple[bool, int]:
    b = data[pos]
    if b > 1:
        raise ValueError(f"invalid boolean byte {b}")
    return b == 1, pos + 1


_READERS: dict[str, Callable[[bytes, int], tuple[Any, int]]] = {
    "long": read_long,
    "int": read_long,
    "string": read_string,
    "bytes": read_bytes,
    "boolean": read_boolean,
}
_PRIMITIVES = frozenset(_READERS)


class _Unsupported(Exception):
    """A schema shape this module does not compile (fastavro handles it)."""


def _shape(t: Any) -> tuple[str, int | None]:
    """(primitive, position of null in a two-branch union or None)."""
    if isinstance(t, dict) and set(t) <= {"type", "logicalType"} and isinstance(t["type"], str):
        t = t["type"]
    if isinstance(t, str) and t in _PRIMITIVES:
        return t, None
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        other = t[1 - t.index("null")]
        prim, nested = _shape(other)
        if nested is None:
            return prim, t.index("null")
    raise _Unsupported(repr(t)[:80])


def _write_code(expr: str, t: Any, var: str, lines: list[str], indent: str) -> None:
    prim, null_at = _shape(t)
    lines.append(f"{indent}{var} = {expr}")
    if null_at is not None:
        null_b, some_b = (b"\x00", b"\x02") if null_at == 0 else (b"\x02", b"\x00")
        lines.append(f"{indent}if {var} is None:")
        lines.append(f"{indent}    b += {null_b!r}")
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    b += {some_b!r}")
        indent += "    "
    # ``write_long``'s own first step inlined: one lookup for 0..8191, no call.
    if prim == "string":
        lines.append(f"{indent}{var} = {var}.encode()")
        lines.append(f"{indent}n = len({var})")
        lines.append(f"{indent}b += _small[n] if n < 8192 else _long(n); b += {var}")
    elif prim == "bytes":
        lines.append(f"{indent}n = len({var})")
        lines.append(f"{indent}b += _small[n] if n < 8192 else _long(n); b += {var}")
    elif prim == "boolean":
        lines.append(f"{indent}b += b'\\x01' if {var} else b'\\x00'")
    else:
        lines.append(f"{indent}b += _small[{var}] if 0 <= {var} < 8192 else _long({var})")


def _read_prim(prim: str, var: str, lines: list[str], indent: str) -> None:
    """Inline reads with a one-byte fast path (short strings, small numbers)."""
    if prim == "string":
        lines.append(f"{indent}b = data[pos]")
        lines.append(f"{indent}if b < 0x80 and not b & 1:")
        lines.append(f"{indent}    end = pos + 1 + (b >> 1)")
        lines.append(f"{indent}    if end > size:")
        lines.append(f"{indent}        raise EOFError")
        lines.append(f"{indent}    {var} = data[pos + 1 : end].decode()")
        lines.append(f"{indent}    pos = end")
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    {var}, pos = _r_string(data, pos)")
    elif prim in ("long", "int"):
        lines.append(f"{indent}b = data[pos]")
        lines.append(f"{indent}if b < 0x80:")
        lines.append(f"{indent}    {var} = (b >> 1) ^ -(b & 1)")
        lines.append(f"{indent}    pos += 1")
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    {var}, pos = _r_long(data, pos)")
    else:
        lines.append(f"{indent}{var}, pos = _r_{prim}(data, pos)")


def _read_code(t: Any, var: str, lines: list[str]) -> None:
    prim, null_at = _shape(t)
    if null_at is None:
        _read_prim(prim, var, lines, "    ")
        return
    lines.append("    i = data[pos]")
    lines.append("    pos += 1")
    lines.append(f"    if i == {2 * null_at}:")
    lines.append(f"        {var} = None")
    lines.append(f"    elif i == {2 * (1 - null_at)}:")
    _read_prim(prim, var, lines, "        ")
    lines.append("    else:")
    lines.append(f"        raise ValueError(f'union index byte {{i}} out of range for {var}')")


@dataclasses.dataclass(frozen=True)
class Compiled:
    """Per payload class, a writer of the whole envelope; per union index, a reader."""

    writers: dict[type, Callable[..., bytes]]
    #: reader(data, pos) -> (Envelope, end position); ``None`` when not compiled.
    read: Callable[[bytes, int], tuple[Any, int]] | None


def compile_schema(
    parsed: dict[str, Any],
    header: bytes,
    classes: dict[str, type],
    envelope: type,
    extras: Mapping[str, Mapping[str, Callable[[Any, Any], Any]]] | None = None,
) -> Compiled:
    """Writers for every payload class of ``classes`` (branch fullname -> class) the
    schema can carry, and one reader of the whole envelope (or none: fastavro reads).

    ``extras`` (branch fullname -> field -> ``fn(payload, hint)``) fills branch fields the
    class lacks (the typed payloads); a writer is called ``write(env, payload, hint)``."""
    fields = parsed["fields"]
    names = [f["name"] for f in fields]
    env_names = [f.name for f in dataclasses.fields(envelope)]
    if "payload" not in names or names != env_names:
        return Compiled({}, None)
    branches = next(f["type"] for f in fields if f["name"] == "payload")
    writers: dict[type, Callable[..., bytes]] = {}
    readers: list[Callable[..., Any] | None] = []
    for index, branch in enumerate(branches):
        cls = classes.get(branch["name"]) if isinstance(branch, dict) else None
        try:
            if cls is None:
                raise _Unsupported("no class")
            own_extras = (extras or {}).get(branch["name"], {})
            writers[cls] = _compile_writer(fields, index, branch, cls, header, own_extras)
            readers.append(_compile_branch_reader(branch, cls))
        except _Unsupported:
            readers.append(None)
    try:
        read = _compile_reader(fields, readers, envelope)
    except _Unsupported:
        read = None
    return Compiled(writers, read)


def _compile_writer(
    fields: list[dict[str, Any]],
    index: int,
    branch: dict[str, Any],
    cls: type,
    header: bytes,
    extras: Mapping[str, Callable[[Any, Any], Any]],
) -> Callable[..., bytes]:
    own = {f.name for f in dataclasses.fields(cls)}
    lines = ["def write(env, p, hint=None):", f"    b = bytearray({header!r})"]
    for f in fields:
        if f["name"] != "payload":
            _write_code(f"env.{f['name']}", f["type"], "v", lines, "    ")
            continue
        lines.append(f"    b += {write_long(index)!r}")
        for pf in branch["fields"]:
            name = pf["name"]
            expr = (
                f"p.{name}" if name in own else f"_x_{name}(p, hint)" if name in extras else "None"
            )
            _write_code(expr, pf["type"], "v", lines, "    ")
    lines.append("    return bytes(b)")
    scope: dict[str, Any] = {"_long": write_long, "_small": _SMALL}
    scope |= {f"_x_{name}": fn for name, fn in extras.items()}
    exec("\n".join(lines), scope)  # source built here from the schema only
    return scope["write"]  # type: ignore[no-any-return]


def _compile_branch_reader(branch: dict[str, Any], cls: type) -> Callable[..., Any]:
    schema_names = [pf["name"] for pf in branch["fields"]]
    own = [f.name for f in dataclasses.fields(cls)]
    if set(own) - set(schema_names):
        raise _Unsupported("class field missing from the schema")
    lines = ["def read(data, pos):", "    size = len(data)"]
    for i, pf in enumerate(branch["fields"]):
        _read_code(pf["type"], f"f{i}", lines)
    args = ", ".join(f"f{schema_names.index(n)}" for n in own)
    lines.append(f"    return _cls({args}), pos")
    scope: dict[str, Any] = {f"_r_{k}": v for k, v in _READERS.items()} | {"_cls": cls}
    exec("\n".join(lines), scope)  # source built here from the schema only
    return scope["read"]  # type: ignore[no-any-return]


def _compile_reader(
    fields: list[dict[str, Any]], readers: list[Callable[..., Any] | None], envelope: type
) -> Callable[[bytes, int], tuple[Any, int]]:
    lines = ["def read(data, pos):", "    size = len(data)"]
    for f in fields:
        if f["name"] == "payload":
            lines.append("    i, pos = _r_long(data, pos)")
            lines.append("    if not 0 <= i < _n:")
            lines.append("        raise ValueError(f'union index {i} out of range for payload')")
            lines.append("    branch = _branches[i]")
            lines.append("    if branch is None:")
            lines.append("        raise _Unsupported(i)")
            lines.append("    payload, pos = branch(data, pos)")
        else:
            _read_code(f["type"], f["name"], lines)
    args = ", ".join(f["name"] for f in fields)
    lines.append(f"    return _env({args}), pos")
    scope: dict[str, Any] = {f"_r_{k}": v for k, v in _READERS.items()}
    scope |= {"_branches": readers, "_n": len(readers), "_env": envelope}
    scope["_Unsupported"] = _Unsupported
    exec("\n".join(lines), scope)  # source built here from the schema only
    return scope["read"]  # type: ignore[no-any-return]


#: Raised by a compiled reader for a branch it cannot read: fall back to fastavro.
Unsupported = _Unsupported
