"""Fingerprints of definitions: canonical JSON and a hash of each function's code.

A run records its definition's digest, so a history started by different code can be
told apart. The digest covers structure and the bytecode, constants, names, defaults and
closure values of every function, so it changes whenever the code does; not the values of
module-level names a function reads when it runs (docs/versioning.md says so, and how to
make such a value part of the digest).
"""

from __future__ import annotations

import functools
import hashlib
import json
import types
from typing import Any

from pydantic import BaseModel

__all__ = ["callable_fingerprint", "canonical_json"]


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, with
#: the encoder built once instead of per call (a decision calls this per step input).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """Deterministic JSON text of ``value`` (pydantic models are dumped in JSON mode)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return _CANONICAL.encode(value)


def _code_fingerprint(code: types.CodeType, h: Any) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_fingerprint(const, h)
        elif isinstance(const, frozenset):
            h.update(repr(sorted(map(repr, const))).encode())
        else:
            h.update(repr(const).encode())


_SIMPLE = (int, float, str, bool, bytes, type(None), tuple)


def callable_fingerprint(fn: Any) -> dict[str, Any] | None:
    """Qualified name and a hash of the code (bytecode, constants, names, closure values).

    The bytecode depends on the Python minor version, so a new interpreter may change
    digests of otherwise identical definitions.
    """
    if fn is None:
        return None
    if isinstance(fn, functools.partial):
        inner = callable_fingerprint(fn.func)
        return {"partial": inner, "args": repr(fn.args), "kwargs": repr(sorted(fn.keywords))}
    if not isinstance(fn, types.FunctionType | types.MethodType):
        call = type(fn).__call__
        return {
            "object": f"{type(fn).__module__}.{type(fn).__qualname__}",
            "call": callable_fingerprint(call) if isinstance(call, types.FunctionType) else None,
        }
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    h = hashlib.sha256()
    _code_fingerprint(func.__code__, h)
    h.update(repr(func.__defaults__).encode())
    for cell in func.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # empty cell
            value = None
        h.update(
            repr(value).encode() if isinstance(value, _SIMPLE) else type(value).__name__.encode()
        )
    return {"name": f"{func.__module__}.{func.__qualname__}", "code": h.hexdigest()}
