"""A published successor must read its predecessor's values: the export's BACKWARD rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastavro import parse_schema

from orchestrator.payload_schemas.compatibility import resolution_problems

V1: dict[str, Any] = {
    "type": "record",
    "name": "Input",
    "namespace": "keel.payload.activity.pay",
    "fields": [
        {"name": "amount", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [{"name": "sku", "type": "string"}],
                },
            },
        },
        {"name": "tags", "type": {"type": "map", "values": "keel.payload.activity.pay.Line"}},
    ],
}


def _changed(edit: Any) -> dict[str, Any]:
    new = copy.deepcopy(V1)
    edit(new)
    parse_schema(new)  # still a valid schema
    return new


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


def test_compatible_changes_resolve() -> None:
    assert resolution_problems(V1, V1) == []
    for edit in (
        lambda s: s["fields"].append({"name": "x", "type": ["null", "long"], "default": None}),
        lambda s: s["fields"].append({"name": "y", "type": "boolean", "default": False}),
        lambda s: _field(s, "amount").update(type="double"),  # long -> double: a promotion
        lambda s: _field(s, "amount").update(type=["null", "long"]),  # a reader union
        lambda s: _field(s, "kind")["type"]["symbols"].append("C"),
        lambda s: s["fields"].remove(_field(s, "note")),  # a removed field is skipped
    ):
        assert resolution_problems(V1, _changed(edit)) == []


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda s: s["fields"].append({"name": "x", "type": "long"}),
            "x: new field without a default",
        ),
        (
            lambda s: _field(s, "amount").update(type="string"),
            "amount: long cannot be read as string",
        ),
        (
            lambda s: _field(s, "note").update(type="string", default="-"),
            "note: null cannot be read as string",
        ),
        (
            lambda s: _field(s, "kind")["type"].update(symbols=["A"]),
            "kind: symbols ['B'] are gone and the enum has no default",
        ),
        (
            lambda s: _field(s, "lines")["type"]["items"]["fields"].append(
                {"name": "qty", "type": "long"}
            ),
            "lines[].qty: new field without a default",
        ),
    ],
)
def test_incompatible_changes_say_where(edit: Any, problem: str) -> None:
    assert problem in resolution_problems(V1, _changed(edit))
