"""An application's payload schemas: what it declares, and what is published in ``avro/``.

Each model an application declares for data its events carry becomes one Avro record
(:mod:`.generator`), named after what it types (its *binding*):

==========================================  =============================================
``keel.payload.workflow.<name>.v<V>.Input``  the input of version V of workflow ``name``
``keel.payload.workflow.<name>.v<V>.Output`` its output (``output_model``)
``keel.payload.activity.<type>.Input``       the input of activity type ``type``
``keel.payload.activity.<type>.Result``      its result (the handler's ``output``)
==========================================  =============================================

Published versions are files ``<fullname>.v<N>.avsc`` under ``avro/payloads/``, like the
envelope's: never edited, a changed model gets ``v<N+1>`` (:func:`plan_export`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from orchestrator.domain.model.errors import DefinitionError
from orchestrator.payload_schemas.compatibility import resolution_problems
from orchestrator.payload_schemas.generator import UnsupportedModel, avro_name, model_schema

__all__ = [
    "PAYLOAD_DIR",
    "Binding",
    "DeclaredSchema",
    "ExportPlan",
    "Slot",
    "declared_schemas",
    "plan_export",
    "schema_json",
]

#: Where payload schemas sit inside a schema directory (``avro/payloads/``).
PAYLOAD_DIR = "payloads"
#: The schema properties that say what a payload schema types (not in the canonical form).
_PROPS = ("keel.workflow", "keel.workflow_version", "keel.activity", "keel.slot")


class Slot(StrEnum):
    """Which value of its workflow or activity a payload schema types."""

    INPUT = "input"
    OUTPUT = "output"  # a workflow's
    RESULT = "result"  # an activity's


@dataclass(frozen=True, order=True)
class Binding:
    """What a payload schema types: ``workflow`` + ``version``, or ``activity``; and a slot."""

    slot: Slot
    workflow: str = ""
    version: int = 0
    activity: str = ""

    @property
    def fullname(self) -> str:
        record = "Result" if self.slot == Slot.RESULT else self.slot.title()
        if self.activity:
            return f"keel.payload.activity.{avro_name(self.activity)}.{record}"
        return f"keel.payload.workflow.{avro_name(self.workflow)}.v{self.version}.{record}"

    @property
    def folder(self) -> str:
        """Its files' folder under ``payloads/``."""
        if self.activity:
            return f"activity/{avro_name(self.activity)}"
        return f"workflow/{avro_name(self.workflow)}"

    def props(self) -> dict[str, Any]:
        if self.activity:
            return {"keel.activity": self.activity, "keel.slot": str(self.slot)}
        return {
            "keel.workflow": self.workflow,
            "keel.workflow_version": self.version,
            "keel.slot": str(self.slot),
        }

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> Binding | None:
        """The binding a schema file's properties state (None: not a payload schema)."""
        if "keel.slot" not in schema:
            return None
        return cls(
            Slot(schema["keel.slot"]),
            str(schema.get("keel.workflow", "")),
            int(schema.get("keel.workflow_version", 0)),
            str(schema.get("keel.activity", "")),
        )


@dataclass(frozen=True)
class DeclaredSchema:
    """One declared model: its schema, or why it has none (``schema`` None)."""

    binding: Binding
    model: str
    schema: dict[str, Any] | None
    reason: str = ""


class _Handler(Protocol):
    @property
    def input_model(self) -> type[BaseModel] | None: ...
    @property
    def output_model(self) -> type[BaseModel] | None: ...


class _Definition(Protocol):
    @property
    def input_model(self) -> type[BaseModel]: ...
    @property
    def output_model(self) -> type[BaseModel] | None: ...


class AppLike(Protocol):
    """What this module reads of a ``KeelApp``."""

    @property
    def definitions(self) -> Mapping[tuple[str, int], _Definition]: ...
    @property
    def handlers(self) -> Mapping[str, _Handler]: ...


def declared_schemas(app: AppLike) -> list[DeclaredSchema]:
    """Every model ``app`` declares, sorted by binding; raises ``DefinitionError`` when two
    bindings map to one Avro name (e.g. workflows ``a-b`` and ``a_b``)."""
    models: list[tuple[Binding, type[BaseModel] | None]] = []
    for (name, version), d in app.definitions.items():
        models.append((Binding(Slot.INPUT, name, version), d.input_model))
        models.append((Binding(Slot.OUTPUT, name, version), d.output_model))
    for activity_type, h in app.handlers.items():
        models.append((Binding(Slot.INPUT, activity=activity_type), h.input_model))
        models.append((Binding(Slot.RESULT, activity=activity_type), h.output_model))
    out: list[DeclaredSchema] = []
    owners: dict[str, Binding] = {}
    for binding, model in sorted(models, key=lambda bm: bm[0].fullname):
        if model is None:
            continue
        full = binding.fullname
        if full in owners:
            raise DefinitionError(f"{owners[full]} and {binding} both map to Avro name {full}")
        owners[full] = binding
        ns, _, name = full.rpartition(".")
        try:
            schema = model_schema(model, ns, name, binding.props())
        except UnsupportedModel as exc:
            out.append(DeclaredSchema(binding, model.__name__, None, str(exc)))
            continue
        out.append(DeclaredSchema(binding, model.__name__, schema))
    return out


def schema_json(schema: Mapping[str, Any]) -> str:
    """A schema file's text: two-space indented JSON, one trailing newline."""
    return json.dumps(schema, indent=2) + "\n"


@dataclass(frozen=True)
class ExportPlan:
    """What ``keel schemas export`` writes: ``files`` (relative path -> text), ``new`` (the
    relative paths of versions not yet published), ``untyped`` (models without a schema)."""

    files: dict[str, str]
    new: tuple[str, ...]
    untyped: tuple[DeclaredSchema, ...]


class SchemaFileLike(Protocol):
    """A schema file as the codec loads it (``orchestrator.payload_schemas.codec.SchemaFile``)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def schema(self) -> dict[str, Any]: ...
    @property
    def fingerprint(self) -> bytes: ...


class PublishedFile(SchemaFileLike, Protocol):
    """A published schema file, with where it is."""

    @property
    def path(self) -> Path: ...


def plan_export(
    declared: Sequence[DeclaredSchema],
    published: Iterable[PublishedFile],
    fingerprint: Callable[[dict[str, Any]], bytes],
) -> ExportPlan:
    """The files an export writes (paths relative to the export folder): every published
    version of the envelope and of each declared payload schema, plus a new version for
    each declared schema whose newest published one differs from it (``fingerprint``:
    schema -> 8 bytes); DefinitionError when that version could not read its predecessor's
    values. A released file is copied as it is, never rewritten; ``published``
    may hold one file twice (Keel's folder and the export folder) only with one content."""
    names = {d.binding.fullname for d in declared}
    by_name: dict[str, dict[int, PublishedFile]] = {}
    files: dict[str, str] = {}
    for f in published:
        if Binding.of(f.schema) is not None and f.name not in names:
            continue  # another application's payload schema
        path = _path_of(f.schema, f.name, f.version)
        text = f.path.read_text(encoding="utf-8")
        if files.setdefault(path, text) != text:
            raise DefinitionError(f"{f.path} and another {path} differ: a released schema changed")
        by_name.setdefault(f.name, {})[f.version] = f
    new: list[str] = []
    untyped: list[DeclaredSchema] = []
    for d in declared:
        if d.schema is None:
            untyped.append(d)
            continue
        versions = [v for _, v in sorted(by_name.get(d.binding.fullname, {}).items())]
        if versions and versions[-1].schema == d.schema:
            continue
        fp = fingerprint(d.schema)
        if any(f.fingerprint == fp for f in versions):
            raise DefinitionError(
                f"{d.binding.fullname}: the model's schema differs from v{versions[-1].version} "
                "only in defaults or properties, which a new version cannot express "
                "(Avro fingerprints the canonical form)"
            )
        n = versions[-1].version + 1 if versions else 1
        problems = resolution_problems(versions[-1].schema, d.schema) if versions else []
        if problems:
            raise DefinitionError(
                f"{d.binding.fullname} v{n} ({d.model}) could not read what v{n - 1} wrote: "
                f"{'; '.join(problems)}. Give a new field a default, or type the data under "
                "a new name (a new workflow version, a new activity type)"
            )
        path = _path_of(d.schema, d.binding.fullname, n)
        files[path] = schema_json(d.schema)
        new.append(path)
    return ExportPlan(files, tuple(new), tuple(untyped))


def _path_of(schema: Mapping[str, Any], fullname: str, version: int) -> str:
    """Where a schema file sits in a schema folder: the envelope's at the top, a payload
    schema's under ``payloads/{workflow,activity}/<name>/``."""
    binding = Binding.of(schema)
    folder = "" if binding is None else f"{PAYLOAD_DIR}/{binding.folder}/"
    return f"{folder}{fullname}.v{version}.avsc"
