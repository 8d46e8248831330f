"""Payload schemas: the Avro form of the data an application's models declare.

``generator`` turns a pydantic model into an Avro record; ``catalog`` names an
application's models by what they type and plans the published files under
``avro/payloads/`` (``keel schemas export``); ``typed`` writes (through ``binary``'s
compiled writers) and reads the typed payloads the codec puts in the envelope
(docs/event-log.md). Codec layer: imports the
pure domain, pydantic and fastavro only.
"""

from __future__ import annotations

from orchestrator.payload_schemas.catalog import (
    PAYLOAD_DIR,
    Binding,
    DeclaredSchema,
    ExportPlan,
    Slot,
    declared_schemas,
    plan_export,
    schema_json,
)
from orchestrator.payload_schemas.generator import UnsupportedModel, model_schema
from orchestrator.payload_schemas.typed import BindingKey, TypedPayloads, TypedValue, binding_key

__all__ = [
    "PAYLOAD_DIR",
    "Binding",
    "BindingKey",
    "DeclaredSchema",
    "ExportPlan",
    "Slot",
    "TypedPayloads",
    "TypedValue",
    "UnsupportedModel",
    "binding_key",
    "declared_schemas",
    "model_schema",
    "plan_export",
    "schema_json",
]
