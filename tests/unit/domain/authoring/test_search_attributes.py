"""Search attributes declared on a definition: checked when built, outside the digest,
computed from a run's state they can read but never change
(orchestrator/domain/authoring/search_attributes.py)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain.authoring.definitions import (
    DefinitionError,
    State,
    Step,
    WorkflowDefinition,
)
from orchestrator.domain.authoring.search_attributes import (
    MAX_KEYWORD_CHARS,
    SearchAttribute,
    SearchKind,
    compute_search_attributes,
    search_value,
)
from orchestrator.domain.model.state import WorkflowState


class Inp(BaseModel):
    invoice: str
    amount: float
    due: date | None = None


def _defn(*attributes: SearchAttribute) -> WorkflowDefinition:
    states = [State("s", steps=[Step("a", "act")], complete=lambda ctx: ctx.results["a"])]
    return WorkflowDefinition("w", 1, Inp, states, search_attributes=attributes)


def _state(**over: Any) -> WorkflowState:
    base: dict[str, Any] = {
        "workflow_id": "wf-1",
        "run_id": "r1",
        "name": "w",
        "version": 1,
        "digest": "d",
        "input_json": '{"invoice": "INV-7", "amount": 120.5, "due": "2026-12-31"}',
        "seq": 3,
        "current_state": "s",
        "step_results": {"a": '{"posting_id": "P-1"}'},
    }
    return WorkflowState(**{**base, **over})


INVOICE = SearchAttribute("invoice", SearchKind.KEYWORD, lambda ctx: ctx.input.invoice)
AMOUNT = SearchAttribute("amount", SearchKind.NUMBER, lambda ctx: ctx.input.amount)


# -- declaring ------------------------------------------------------------------------


def test_a_definition_indexes_its_attributes_by_name() -> None:
    d = _defn(INVOICE, AMOUNT)
    assert list(d.search_attributes) == ["invoice", "amount"]
    assert d.search_attributes["amount"].kind is SearchKind.NUMBER
    assert _defn().search_attributes == {}


def test_a_kind_given_as_its_string_becomes_the_enum() -> None:
    d = _defn(SearchAttribute("invoice", "keyword", lambda ctx: 1))  # type: ignore[arg-type]
    assert d.search_attributes["invoice"].kind is SearchKind.KEYWORD


def test_attributes_are_outside_the_digest() -> None:
    assert _defn(INVOICE, AMOUNT).digest == _defn().digest


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        (
            (INVOICE, INVOICE),
            "workflow 'w' v1: duplicate search attribute 'invoice'",
        ),
        (
            (SearchAttribute("in voice", SearchKind.KEYWORD, lambda ctx: 1),),
            "workflow 'w' v1: search attribute 'in voice': invalid name (letters, digits, _.-)",
        ),
        (
            (SearchAttribute("x", "colour", lambda ctx: 1),),  # type: ignore[arg-type]
            "workflow 'w' v1: search attribute 'x': kind must be one of keyword, number, "
            "time, got 'colour'",
        ),
        (
            (SearchAttribute("x", SearchKind.NUMBER, lambda: 1),),  # type: ignore[arg-type]
            "workflow 'w' v1: search attribute 'x': of must take (ctx)",
        ),
        (
            (SearchAttribute("x", SearchKind.NUMBER, "ctx.input.amount"),),  # type: ignore[arg-type]
            "workflow 'w' v1: search attribute 'x': of must be a plain function of (ctx)",
        ),
        (
            ("amount",),
            "workflow 'w' v1: search_attributes must be SearchAttribute objects, got 'amount'",
        ),
    ],
)
def test_a_bad_declaration_is_refused_when_built(attributes: tuple[Any, ...], message: str) -> None:
    with pytest.raises(DefinitionError) as exc:
        _defn(*attributes)
    assert str(exc.value) == message


# -- values ---------------------------------------------------------------------------


def test_values_are_held_as_the_index_compares_them() -> None:
    assert search_value(SearchKind.KEYWORD, "ACME") == "ACME"
    assert search_value(SearchKind.NUMBER, 7) == 7
    assert search_value(SearchKind.NUMBER, 2.5) == 2.5
    noon = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert search_value(SearchKind.TIME, noon) == 1_796_299_200_000
    assert search_value(SearchKind.TIME, noon.replace(tzinfo=None)) == 1_796_299_200_000
    plus_one = noon.replace(hour=13, tzinfo=timezone(timedelta(hours=1)))
    assert search_value(SearchKind.TIME, plus_one) == 1_796_299_200_000
    assert search_value(SearchKind.TIME, date(2026, 12, 3)) == 1_796_256_000_000


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        (SearchKind.KEYWORD, 7, "a keyword must be a string, got int"),
        (
            SearchKind.KEYWORD,
            "x" * (MAX_KEYWORD_CHARS + 1),
            f"a keyword is at most {MAX_KEYWORD_CHARS} characters",
        ),
        (SearchKind.NUMBER, True, "a number must be an int or a float, got bool"),
        (SearchKind.NUMBER, "7", "a number must be an int or a float, got str"),
        (SearchKind.NUMBER, float("nan"), "a number must be finite, got nan"),
        (SearchKind.NUMBER, 2**60, "an int number is at most 2**53 in size (exact in the index)"),
        (SearchKind.TIME, "2026-12-03", "a time must be a datetime or a date, got str"),
    ],
)
def test_a_value_of_the_wrong_kind_says_why(kind: SearchKind, value: Any, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        search_value(kind, value)
    assert str(exc.value) == message


# -- computing ------------------------------------------------------------------------


def test_attributes_are_computed_from_input_and_results() -> None:
    posted = SearchAttribute(
        "posting_id",
        SearchKind.KEYWORD,
        lambda ctx: ctx.results["a"]["posting_id"] if "a" in ctx.results else None,
    )
    due = SearchAttribute("due", SearchKind.TIME, lambda ctx: ctx.input.due)
    d = _defn(INVOICE, AMOUNT, posted, due)
    assert compute_search_attributes(d, _state()) == (
        {
            "invoice": "INV-7",
            "amount": 120.5,
            "posting_id": "P-1",
            "due": 1_798_675_200_000,
        },
        {},
    )
    # not set yet (None) is simply absent
    before = _state(step_results={}, input_json='{"invoice": "INV-8", "amount": 3}')
    assert compute_search_attributes(d, before) == ({"invoice": "INV-8", "amount": 3}, {})


def test_a_failing_or_mistyped_attribute_is_left_out_with_its_reason() -> None:
    d = _defn(
        INVOICE,
        SearchAttribute("boom", SearchKind.NUMBER, lambda ctx: 1 / 0),
        SearchAttribute("wrong", SearchKind.NUMBER, lambda ctx: ctx.input.invoice),
        SearchAttribute("tamper", SearchKind.KEYWORD, lambda ctx: ctx.results["a"].clear()),
    )
    state = _state()
    values, problems = compute_search_attributes(d, state)
    assert values == {"invoice": "INV-7"}
    assert problems == {
        "boom": "ZeroDivisionError: division by zero",
        "wrong": "ValueError: a number must be an int or a float, got str",
        "tamper": "tried to change the run's state (.clear() on a mapping); it is read-only",
    }
    assert state.step_results == {"a": '{"posting_id": "P-1"}'}  # read, never changed


def test_a_definition_without_attributes_computes_nothing() -> None:
    assert compute_search_attributes(_defn(), _state()) == ({}, {})
