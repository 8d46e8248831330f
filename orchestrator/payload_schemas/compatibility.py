"""Can a new version of a payload schema read what the old one wrote? (Avro's resolution
rules, for the shapes payload schemas have: records, arrays, maps, enums, primitives and
``X | None`` unions.) A published successor must, as a schema registry's BACKWARD rule
asks: readers resolve every typed value to the newest version of its name."""

from __future__ import annotations

from typing import Any

__all__ = ["resolution_problems"]

#: Writer primitive -> the reader primitives that read it (Avro's promotions).
_PROMOTES = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
    "boolean": {"boolean"},
    "null": {"null"},
}


def resolution_problems(writer: dict[str, Any], reader: dict[str, Any]) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    out: list[str] = []
    _check(writer, reader, _names(writer, {}, ""), _names(reader, {}, ""), "", out, set())
    return out


def _names(t: Any, out: dict[str, Any], ns: str) -> dict[str, Any]:
    if isinstance(t, list):
        for b in t:
            _names(b, out, ns)
    elif isinstance(t, dict):
        kind = t["type"]
        if kind in ("record", "enum"):
            ns = t.get("namespace", ns)
            out[_full(t["name"], ns)] = {**t, "namespace": ns}
            for f in t.get("fields", []):
                _names(f["type"], out, ns)
        elif kind == "array":
            _names(t["items"], out, ns)
        elif kind == "map":
            _names(t["values"], out, ns)
    return out


def _full(name: str, ns: str) -> str:
    return name if "." in name or not ns else f"{ns}.{name}"


def _resolve(t: Any, names: dict[str, Any], ns: str) -> Any:
    """A type with named references replaced by their definitions (one level)."""
    if isinstance(t, str) and t not in _PROMOTES:
        return names[_full(t, ns)]
    if isinstance(t, dict) and t["type"] in _PROMOTES:
        return t["type"]  # a primitive with properties
    return t


def _check(
    w: Any, r: Any, wn: dict[str, Any], rn: dict[str, Any], at: str, out: list[str], seen: set[str]
) -> None:
    w, r = _resolve(w, wn, ""), _resolve(r, rn, "")
    if isinstance(w, list):  # each branch the writer may write must be readable
        for branch in w:
            _check(branch, r, wn, rn, at, out, seen)
        return
    if isinstance(r, list):  # the reader takes the first branch that reads the writer's
        for branch in r:
            trial: list[str] = []
            _check(w, branch, wn, rn, at, trial, set(seen))
            if not trial:
                return
        out.append(f"{at or 'the value'}: no branch of {_kind(r)} reads {_kind(w)}")
        return
    if isinstance(w, str) or isinstance(r, str):
        if not (isinstance(w, str) and isinstance(r, str) and r in _PROMOTES.get(w, ())):
            out.append(f"{at or 'the value'}: {_kind(w)} cannot be read as {_kind(r)}")
        return
    if w["type"] != r["type"]:
        out.append(f"{at or 'the value'}: {w['type']} cannot be read as {r['type']}")
    elif w["type"] == "array":
        _check(w["items"], r["items"], wn, rn, f"{at}[]", out, seen)
    elif w["type"] == "map":
        _check(w["values"], r["values"], wn, rn, f"{at}{{}}", out, seen)
    elif w["type"] == "enum":
        lost = [s for s in w["symbols"] if s not in r["symbols"]]
        if lost and "default" not in r:
            out.append(f"{at or 'the value'}: symbols {lost} are gone and the enum has no default")
    elif w["type"] == "record":
        key = f"{w['name']}>{r['name']}"
        if key in seen:  # a recursive record: checked once
            return
        seen.add(key)
        written = {f["name"]: f for f in w["fields"]}
        for f in r["fields"]:
            where = f"{at}.{f['name']}" if at else f["name"]
            if f["name"] in written:
                _check(written[f["name"]]["type"], f["type"], wn, rn, where, out, seen)
            elif "default" not in f:
                out.append(f"{where}: new field without a default")


def _kind(t: Any) -> str:
    if isinstance(t, list):
        return "[" + ", ".join(_kind(b) for b in t) + "]"
    if isinstance(t, dict):
        return str(t.get("name", t["type"]))
    return str(t)
