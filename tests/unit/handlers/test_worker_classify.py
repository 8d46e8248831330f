"""Failure classes: one rule in handlers/sdk/activity_errors.py, the same rule in docs/activities.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from handlers.execution import BadTaskInput, parse_input, result_json
from handlers.sdk.activity_errors import (
    PROGRAMMING_ERRORS,
    FailureClass,
    OutcomeUnknownError,
    PermanentError,
    ResultRefusedError,
    TransientError,
    classify,
    error_type,
)
from orchestrator.application.app import KeelApp, UnknownActivityError
from orchestrator.domain.model.errors import LimitExceededError
from orchestrator.domain.model.limits import MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES

DOCS = Path(__file__).resolve().parents[3] / "docs" / "activities.md"


class Shape(BaseModel):
    n: int


def _validation_error() -> ValidationError:
    try:
        Shape.model_validate({"n": "x"})
    except ValidationError as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TransientError("429"), "transient"),
        (PermanentError("400"), "permanent"),
        (OutcomeUnknownError("lost"), "unknown"),
        (_validation_error(), "permanent"),
        (LimitExceededError("too big"), "permanent"),
        (UnknownActivityError("no handler"), "permanent"),
        (TypeError("unsupported operand"), "permanent"),
        (AttributeError("'NoneType' object has no attribute 'x'"), "permanent"),
        (NameError("name 'x' is not defined"), "permanent"),
        (ValueError("bad"), "transient"),
        (KeyError("k"), "transient"),
        (ConnectionError("reset"), "transient"),
        (TimeoutError(), "transient"),
        (RuntimeError("?"), "transient"),
    ],
)
def test_classify(exc, expected):
    assert classify(exc) == expected
    assert isinstance(classify(exc), FailureClass)


def test_a_refused_result_reports_the_original_error_type():
    assert error_type(ResultRefusedError("result refused", "ValidationError")) == "ValidationError"
    assert error_type(TypeError("x")) == "TypeError"


def test_the_docs_state_the_same_rule():
    text = DOCS.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (\w+) \|.*$", text, re.M)}
    for exc_type in PROGRAMMING_ERRORS:
        assert f"`{exc_type.__name__}`" in rows["permanent"], exc_type
    assert "any other exception" in rows["transient"]
    assert "any unclassified exception" not in text


app = KeelApp("t")


@app.activity("echo", input=Shape, output=Shape)
def echo(x: Shape) -> dict:
    return {"n": x.n}


@app.activity("free")
def free(x: dict) -> dict:
    return x


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "input of activity 'free' is not valid JSON: Expecting property name"),
        ("[" * (MAX_JSON_DEPTH + 1), "input of activity 'free' nests deeper than 64 levels"),
        ('{"n": ' + "9" * 65 + "}", "input of activity 'free' holds an integer of 65 digits"),
        (
            '"' + "x" * MAX_PAYLOAD_BYTES + '"',
            f"input of activity 'free' is {MAX_PAYLOAD_BYTES + 2:,} bytes; the limit is",
        ),
    ],
)
def test_an_input_past_the_limits_is_a_permanent_bad_input(text, message):
    with pytest.raises(BadTaskInput) as caught:
        parse_input(app.handler("free"), text)
    assert str(caught.value).startswith(message)
    assert classify(caught.value) == "permanent"


@pytest.mark.parametrize(
    ("activity", "raw", "error", "detail"),
    [
        ("echo", {"n": "x"}, "ValidationError", "invalid Shape: field 'n': Input should be"),
        ("free", {"n": 10**70}, "LimitExceededError", "holds an integer of 71 digits"),
        ("free", {"s": {1, 2}}, "TypeError", "Object of type set is not JSON serializable"),
        ("free", {"b": "x" * MAX_PAYLOAD_BYTES}, "LimitExceededError", "the limit is 262,144"),
    ],
)
def test_an_unusable_result_is_refused_with_its_reason(activity, raw, error, detail):
    with pytest.raises(ResultRefusedError) as caught:
        result_json(app.handler(activity), raw, side_effect=True)
    refused = caught.value
    assert refused.error_type == error
    assert str(refused).startswith(
        f"result of activity '{activity}' refused after the handler returned; its effect is "
        "recorded and will not be repeated: "
    )
    assert detail in str(refused)
    assert classify(refused) == "permanent"


def test_a_usable_result_is_json_through_the_output_model():
    assert result_json(app.handler("echo"), {"n": 3}, side_effect=False) == '{"n":3}'
