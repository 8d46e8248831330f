"""Idempotency keys: readable, parseable, and never shared by two different triples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.domain.model.keys import idempotency_key, parse_idempotency_key

triples = st.tuples(st.text(), st.text(), st.integers(min_value=0, max_value=10**12))


def test_simple_key_is_readable() -> None:
    assert idempotency_key("wf-1", "charge_card", 2) == "wf-1/charge_card/2"


def test_separators_inside_parts_are_escaped() -> None:
    assert idempotency_key("a/b", "c", 1) == "a%2Fb/c/1"
    assert idempotency_key("a", "b/c", 1) == "a/b%2Fc/1"
    assert idempotency_key("a%2Fb", "c", 1) == "a%252Fb/c/1"
    assert idempotency_key("", "", 0) == "//0"


def test_classic_concatenation_ambiguity_is_gone() -> None:
    assert idempotency_key("wf1", "2x", 3) != idempotency_key("wf12", "x", 3)
    assert idempotency_key("a/b", "c", 1) != idempotency_key("a", "b/c", 1)


@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "a/b/c/1", "a/b/x", "a/b/-1", "a/b/01", "a/b/ 1", "%41/b/1", "a/b/\u0661"],
)
def test_parse_refuses_what_it_did_not_make(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_idempotency_key(bad)


def test_bad_logical_attempt() -> None:
    with pytest.raises(ValueError):
        idempotency_key("a", "b", -1)
    with pytest.raises(TypeError):
        idempotency_key("a", "b", True)


@given(triples)
def test_round_trip(t: tuple[str, str, int]) -> None:
    assert parse_idempotency_key(idempotency_key(*t)) == t


@given(triples, triples)
def test_injective(a: tuple[str, str, int], b: tuple[str, str, int]) -> None:
    if a != b:
        assert idempotency_key(*a) != idempotency_key(*b)


@given(st.lists(triples, min_size=2, max_size=30, unique=True))
def test_injective_over_sets(ts: list[tuple[str, str, int]]) -> None:
    assert len({idempotency_key(*t) for t in ts}) == len(ts)


@given(
    st.tuples(
        st.text(alphabet="/%2Fa", max_size=6),
        st.text(alphabet="/%2Fa", max_size=6),
        st.integers(0, 3),
    ),
    st.tuples(
        st.text(alphabet="/%2Fa", max_size=6),
        st.text(alphabet="/%2Fa", max_size=6),
        st.integers(0, 3),
    ),
)
def test_injective_on_separator_heavy_text(
    a: tuple[str, str, int], b: tuple[str, str, int]
) -> None:
    assert (idempotency_key(*a) == idempotency_key(*b)) == (a == b)


@given(st.text(alphabet=st.sampled_from("aZ09_.-~/%: é\u00a0\ud800"), max_size=12) | st.text())
def test_every_part_is_escaped_exactly_as_quote_escapes_it(part: str) -> None:
    """Keys are recorded in histories: the unreserved fast path must never change one."""
    from urllib.parse import quote

    from orchestrator.domain.model.keys import _escape

    assert _escape(part) == quote(part, safe="", encoding="utf-8", errors="surrogatepass")
