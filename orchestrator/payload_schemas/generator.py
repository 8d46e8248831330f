"""A pydantic model as an Avro record schema: pure, deterministic, no I/O.

The mapping (docs/event-log.md, "Payload schemas"): ``str`` → ``string``, ``int`` →
``long``, ``float`` → ``double``, ``bool`` → ``boolean``; ``X | None`` → a union with
``null`` (``null`` first unless the field's default is not None); ``list``/``tuple[X,
...]``/``set`` → ``array``; ``dict[str, X]`` → ``map``; a nested model → a named record
in the same namespace; an ``Enum`` whose values are Avro names → ``enum``, else its
values' primitive; ``Literal`` → the values' primitive. Values pydantic writes as text
keep that text: ``Decimal``, ``datetime``, ``date``, ``time``, ``timedelta`` → ``string``
with a ``keel.format`` property, ``UUID`` → ``string`` with ``logicalType: uuid``.
Field defaults become Avro defaults when pydantic can write them as JSON.

Anything else (``Any``, a bare ``dict``, a union of two types besides ``None``, bytes)
has no Avro form: :class:`UnsupportedModel` says which field, and such a payload stays
JSON text only.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticUndefined

from orchestrator.domain.model.errors import DefinitionError

__all__ = ["AVRO_NAME", "UnsupportedModel", "avro_name", "model_schema"]

#: An Avro name (one dot-free component of a full name).
AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_PRIMITIVES: dict[type, str] = {str: "string", bool: "boolean", int: "long", float: "double"}
_TEXT_FORMS: dict[type, str] = {
    Decimal: "decimal",
    dt.datetime: "date-time",
    dt.date: "date",
    dt.time: "time",
    dt.timedelta: "duration",
}
_ARRAYS = (list, tuple, set, frozenset, Sequence)


class UnsupportedModel(DefinitionError):
    """A model (or one of its fields) has no Avro form; its payloads stay JSON only."""


def avro_name(text: str) -> str:
    """``text`` as dot-separated Avro name components: other characters become ``_``,
    a component starting with a digit gets a leading ``_``."""
    parts = []
    for part in text.split("."):
        part = re.sub(r"[^A-Za-z0-9_]", "_", part) or "_"
        parts.append(f"_{part}" if part[0].isdigit() else part)
    return ".".join(parts)


def model_schema(
    model: type[BaseModel], namespace: str, name: str, props: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The Avro record ``namespace.name`` for ``model``; ``props`` are added to the top
    record (not part of the canonical form). Raises :class:`UnsupportedModel`."""
    top = _Builder(namespace).record(model, name)
    return {**top, **dict(props or {})} if props else top


class _Builder:
    """One schema's named types: each model class is defined once, then named."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.names: dict[type, str] = {}  # class -> full name
        self.taken: set[str] = set()

    def _claim(self, short: str) -> str:
        name, n = short, 2
        while f"{self.namespace}.{name}" in self.taken:
            name, n = f"{short}_{n}", n + 1
        full = f"{self.namespace}.{name}"
        self.taken.add(full)
        return full

    def record(self, model: type[BaseModel], short: str | None = None) -> dict[str, Any]:
        full = self._claim(short or model.__name__)
        self.names[model] = full
        fields = []
        for fname, info in model.model_fields.items():
            if not AVRO_NAME.match(fname):
                raise UnsupportedModel(f"{model.__name__}.{fname}: not an Avro field name")
            where = f"{model.__name__}.{fname}"
            annotation = info.annotation
            default = info.default
            has_default = default is not PydanticUndefined and info.default_factory is None
            avro = self.type_of(annotation, where, default if has_default else PydanticUndefined)
            field: dict[str, Any] = {"name": fname, "type": avro}
            if has_default:
                json_default = _json_default(annotation, default)
                if json_default is not PydanticUndefined:
                    field["default"] = json_default
            fields.append(field)
        ns, _, name = full.rpartition(".")
        return {"type": "record", "name": name, "namespace": ns, "fields": fields}

    def type_of(self, annotation: Any, where: str, default: Any = PydanticUndefined) -> Any:
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            return self.type_of(args[0], where, default)
        if origin in (typing.Union, types.UnionType):
            others = [a for a in args if a is not type(None)]
            if len(others) != 1 or len(others) == len(args):
                raise UnsupportedModel(f"{where}: a union other than X | None")
            inner = self.type_of(others[0], where)
            no_null_first = default is not PydanticUndefined and default is not None
            return [inner, "null"] if no_null_first else ["null", inner]
        if origin is typing.Literal:
            return _primitive_of(list(args), where)
        if origin in _ARRAYS or annotation in _ARRAYS:
            if not args or (origin is tuple and (len(args) != 2 or args[1] is not Ellipsis)):
                raise UnsupportedModel(f"{where}: an array needs one item type (tuple[X, ...])")
            return {"type": "array", "items": self.type_of(args[0], where)}
        if origin in (dict, Mapping) or annotation in (dict, Mapping):
            if len(args) != 2 or args[0] is not str:
                raise UnsupportedModel(f"{where}: a map needs str keys and a value type")
            return {"type": "map", "values": self.type_of(args[1], where)}
        if isinstance(annotation, type):
            return self._class(annotation, where)
        raise UnsupportedModel(f"{where}: {annotation!r} has no Avro form")

    def _class(self, cls: type, where: str) -> Any:
        if issubclass(cls, BaseModel):
            return self.names[cls] if cls in self.names else self.record(cls)
        if issubclass(cls, enum.Enum):
            values = [m.value for m in cls]
            if values and all(isinstance(v, str) and AVRO_NAME.match(v) for v in values):
                if cls in self.names:
                    return self.names[cls]
                full = self._claim(cls.__name__)
                self.names[cls] = full
                ns, _, name = full.rpartition(".")
                return {"type": "enum", "name": name, "namespace": ns, "symbols": values}
            return _primitive_of(values, where)
        for base, form in _TEXT_FORMS.items():  # datetime before date: it subclasses date
            if issubclass(cls, base):
                return {"type": "string", "keel.format": form}
        if issubclass(cls, uuid.UUID):
            return {"type": "string", "logicalType": "uuid"}
        for base, prim in _PRIMITIVES.items():
            if cls is base or (issubclass(cls, base) and not issubclass(cls, enum.Enum)):
                return prim
        raise UnsupportedModel(f"{where}: {cls.__name__} has no Avro form")


def _primitive_of(values: list[Any], where: str) -> str:
    kinds = {_PRIMITIVES.get(type(v)) for v in values}
    if len(kinds) != 1 or None in kinds:
        raise UnsupportedModel(f"{where}: values of several types ({values!r})")
    return kinds.pop()  # type: ignore[return-value]


def _json_default(annotation: Any, default: Any) -> Any:
    """The default as pydantic writes it in JSON mode (PydanticUndefined when it cannot)."""
    try:
        return TypeAdapter(annotation).dump_python(default, mode="json")
    except Exception:  # a default pydantic cannot write: the field has no Avro default
        return PydanticUndefined
