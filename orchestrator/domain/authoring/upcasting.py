"""Schema versions of recorded inputs and results, and the upcasters that read old ones.

A pydantic model that is recorded (a workflow's input model, an activity's output model)
declares the version of its shape as a class variable, and one pure upcaster per older
version, each taking the JSON data of version *k* to version *k + 1*
(docs/schema-evolution.md)::

    class Invoice(BaseModel):
        schema_version: ClassVar[int] = 3
        total_cents: int
        currency: str

        @staticmethod
        def upcast_from_1(data: dict) -> dict:  # v1 had no currency
            return {**data, "currency": "EUR"}

        @staticmethod
        def upcast_from_2(data: dict) -> dict:  # v2 had a float total
            return {"total_cents": round(data.pop("total") * 100), **data}

What is written records the version it was written under (``WorkflowStarted.
input_schema_version``, ``ActivityCompleted.schema_version``); what is read is upgraded
through the chain to the model's current version. Version 0 means *unversioned* (written
before the model declared a version, or by a model without one): a model without a
version reads everything as it is, and a versioned model reads 0 as its version 1.

A missing upcaster is found when the definition is built (:func:`check_upcasters`); what
can only be found when reading (a result newer than the model, an upcaster that raises
or does not return an object) raises :class:`SchemaUnreadable`, which stops the run in
``needs_attention`` with the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.fingerprint import callable_fingerprint

__all__ = [
    "UPCAST_PREFIX",
    "SchemaUnreadable",
    "Upcaster",
    "check_upcasters",
    "describe_model",
    "schema_version_of",
    "upcast",
    "upcasters_of",
]

#: An upcaster from version k is the model's attribute ``upcast_from_<k>``.
UPCAST_PREFIX = "upcast_from_"

Upcaster = Callable[[Any], Any]


class SchemaUnreadable(Exception):
    """A recorded value cannot be read as the model's current version: the run stops
    in ``needs_attention`` with this reason (a deploy can fix the code, not the record)."""


def schema_version_of(model: type[BaseModel] | None) -> int:
    """The version a model declares (``schema_version: ClassVar[int]``); 0 when none.

    Cached per class: a model without the attribute costs ~2 µs per lookup (pydantic's
    metaclass raises inside ``getattr``), and every decision asks several times.
    """
    if model is None:
        return 0
    return _declared_version(model)


@functools.cache
def _declared_version(model: type[BaseModel]) -> int:
    version = getattr(model, "schema_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise DefinitionError(f"{_name(model)}.schema_version must be an int >= 0, got {version!r}")
    return version


def upcasters_of(model: type[BaseModel]) -> dict[int, Upcaster]:
    """The upcasters a model declares, by the version each one reads."""
    out: dict[int, Upcaster] = {}
    for attr in dir(model):
        if attr.startswith(UPCAST_PREFIX) and attr[len(UPCAST_PREFIX) :].isdigit():
            fn = getattr(model, attr)
            if callable(fn):
                out[int(attr[len(UPCAST_PREFIX) :])] = fn
    return out


def check_upcasters(model: type[BaseModel] | None, where: str) -> None:
    """A ``DefinitionError`` naming every version of ``model`` that could not be read
    (an older version without its upcaster), or an upcaster for a version it does not
    have; ``where`` says which declaration uses the model."""
    if model is None:
        return
    current = schema_version_of(model)
    found = upcasters_of(model)
    missing = [k for k in range(1, current) if k not in found]
    if missing:
        names = ", ".join(f"{UPCAST_PREFIX}{k}" for k in missing)
        raise DefinitionError(
            f"{where}: {_name(model)} is at schema version {current} but declares no "
            f"{names}; results recorded under those versions could not be read"
        )
    extra = sorted(k for k in found if k < 1 or k >= current)
    if extra:
        raise DefinitionError(
            f"{where}: {_name(model)} is at schema version {current}; "
            f"{UPCAST_PREFIX}{extra[0]} reads a version it cannot have"
        )


def upcast(model: type[BaseModel] | None, recorded: int, data: Any, what: str) -> Any:
    """``data`` recorded under version ``recorded``, as the model's current version.

    Pure when the upcasters are; raises :class:`SchemaUnreadable` (``what`` names the
    value) when the record is newer than the model or an upcaster fails.
    """
    current = schema_version_of(model)
    if model is None or current == 0:
        return data
    version = max(recorded, 1)
    if version > current:
        raise SchemaUnreadable(
            f"{what} was written under schema version {version} of {_name(model)}, newer "
            f"than this code's version {current}; deploy code that reads it"
        )
    if version == current:
        return data
    chain = upcasters_of(model)
    while version < current:
        fn = chain.get(version)
        if fn is None:
            raise SchemaUnreadable(
                f"{what}: {_name(model)} declares no {UPCAST_PREFIX}{version}, so schema "
                f"version {version} cannot be read as version {current}"
            )
        try:
            data = fn(data)
        except Exception as exc:
            raise SchemaUnreadable(
                f"{what}: {_name(model)}.{UPCAST_PREFIX}{version} raised "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(data, dict):
            raise SchemaUnreadable(
                f"{what}: {_name(model)}.{UPCAST_PREFIX}{version} returned "
                f"{type(data).__name__}, not an object"
            )
        version += 1
    return data


def _name(model: type[BaseModel]) -> str:
    return getattr(model, "__qualname__", repr(model))


def describe_model(model: type[BaseModel] | None, versioned: bool = True) -> Any:
    """A model's digest view: its name and shape and, for a versioned recorded model,
    its version and the code of its upcasters (an edited upcaster changes the digest)."""
    if model is None:
        return None
    desc: dict[str, Any] = {
        "name": f"{model.__module__}.{model.__qualname__}",
        "schema": model.model_json_schema(),
    }
    version = schema_version_of(model) if versioned else 0
    if version:
        desc["schema_version"] = version
        desc["upcasters"] = {
            str(k): callable_fingerprint(fn) for k, fn in sorted(upcasters_of(model).items())
        }
    return desc
