"""The generator: pydantic models to Avro records, deterministic, strict about what it cannot map."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any, Literal

import pytest
from fastavro import parse_schema
from pydantic import BaseModel, Field

from orchestrator.domain.model.errors import KeelError
from orchestrator.payload_schemas import UnsupportedModel, model_schema
from orchestrator.payload_schemas.generator import avro_name


class Colour(enum.StrEnum):
    RED = "red"
    DARK_BLUE = "dark-blue"  # not an Avro name: the enum maps to string


class Size(enum.StrEnum):
    S = "S"
    M = "M"


class Line(BaseModel):
    sku: str
    qty: int = 1


class Order(BaseModel):
    order_id: str
    total: float = Field(ge=0)
    paid: bool = False
    note: str | None = None
    channel: str | None = "web"
    lines: list[Line]
    tags: set[str] = set()
    attrs: dict[str, int] = {}
    size: Size = Size.M
    colour: Colour | None = None
    kind: Literal["a", "b"] = "a"
    amount: Decimal
    at: dt.datetime
    day: dt.date
    ref: uuid.UUID
    gift: Line | None = None


def _fields(schema: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: f for f in schema["fields"]}


def test_every_supported_type_maps_and_parses() -> None:
    schema = model_schema(Order, "keel.payload.test", "Input", {"keel.slot": "input"})
    parse_schema(schema)  # a valid Avro schema
    f = _fields(schema)
    assert schema["name"] == "Input" and schema["namespace"] == "keel.payload.test"
    assert schema["keel.slot"] == "input"
    assert f["order_id"]["type"] == "string" and "default" not in f["order_id"]
    assert f["total"]["type"] == "double"
    assert f["paid"] == {"name": "paid", "type": "boolean", "default": False}
    assert f["note"] == {"name": "note", "type": ["null", "string"], "default": None}
    assert f["channel"] == {"name": "channel", "type": ["string", "null"], "default": "web"}
    line = f["lines"]["type"]["items"]
    assert line["type"] == "record" and line["name"] == "Line"
    assert _fields(line)["qty"] == {"name": "qty", "type": "long", "default": 1}
    assert f["tags"]["type"] == {"type": "array", "items": "string"}
    assert f["attrs"]["type"] == {"type": "map", "values": "long"}
    assert f["size"]["type"]["symbols"] == ["S", "M"] and f["size"]["default"] == "M"
    assert f["colour"]["type"] == ["null", "string"]
    assert f["kind"]["type"] == "string"
    assert f["amount"]["type"] == {"type": "string", "keel.format": "decimal"}
    assert f["at"]["type"] == {"type": "string", "keel.format": "date-time"}
    assert f["day"]["type"] == {"type": "string", "keel.format": "date"}
    assert f["ref"]["type"] == {"type": "string", "logicalType": "uuid"}
    assert f["gift"]["type"] == ["null", "keel.payload.test.Line"]  # defined once, then named


def test_output_is_deterministic() -> None:
    assert model_schema(Order, "a.b", "Input") == model_schema(Order, "a.b", "Input")


class Node(BaseModel):
    name: str
    children: list[Node] = []


def test_recursive_models_refer_to_themselves_by_name() -> None:
    schema = model_schema(Node, "t", "Input")
    parse_schema(schema)
    assert _fields(schema)["children"]["type"] == {"type": "array", "items": "t.Input"}


class Loose(BaseModel):
    data: Any


class Bare(BaseModel):
    data: dict  # type: ignore[type-arg]


class TwoTypes(BaseModel):
    value: int | str


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (Loose, "Loose.data: Any has no Avro form"),
        (Bare, "Bare.data: a map needs str keys"),
        (TwoTypes, "a union other than X | None"),
    ],
)
def test_what_has_no_avro_form_says_which_field(model: type[BaseModel], match: str) -> None:
    with pytest.raises(UnsupportedModel, match=match) as info:
        model_schema(model, "t", "Input")
    assert isinstance(info.value, KeelError)


def test_names_become_avro_names() -> None:
    assert avro_name("invoice-flow.v2") == "invoice_flow.v2"
    assert avro_name("acme.2fast") == "acme._2fast"
