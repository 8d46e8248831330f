"""``parse_json`` is ``json.loads``, faster: same values, same acceptance, same errors."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from orchestrator.domain.model.limits import loads_bounded, parse_json

SAME = [
    '{"n": 4}',
    ' {"a" : [1, 2.5e-3, null, true, false, "x"]} ',
    "123456789012345678901234567890",  # beyond 64 bits
    "18446744073709551616",
    "-9223372036854775809",
    "9007199254740993",
    "1e400",
    "-1e400",
    "Infinity",
    "-Infinity",
    "1.7976931348623157e308",
    "5e-324",
    "0.1",
    "-0",
    "-0.0",
    '{"a": 1, "a": 2}',  # the last duplicate wins
    '"\\ud83d\\ude00"',  # a surrogate pair
    '"\\u0000"',
    '"é"',
    '{"é": [[[[1]]]]}',
]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and repr(a) == repr(b)


@pytest.mark.parametrize("text", SAME)
def test_the_value_is_json_loads_value(text: str) -> None:
    assert _same(parse_json(text), json.loads(text))


def test_nan_and_a_lone_surrogate_are_accepted_as_json_loads_accepts_them() -> None:
    assert math.isnan(parse_json("NaN"))
    assert parse_json('"\\ud800"') == "\ud800"  # the fast parser refuses it; json decides


@pytest.mark.parametrize("text", ["", "01", "[1,]", '{"a": 1} x', '"abc', "+1", ".5"])
def test_what_json_loads_refuses_fails_with_its_message(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        parse_json(text)
    assert str(got.value) == str(expected.value)


def test_loads_bounded_keeps_its_messages() -> None:
    with pytest.raises(ValueError, match="Expecting value: line 1 column 1"):
        loads_bounded("nope", "the input")
