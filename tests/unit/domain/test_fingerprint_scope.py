"""What a definition's digest covers (docs/versioning.md): code, literals, defaults and
closure values, not module-level names read at run time."""

from __future__ import annotations

from typing import Any

from orchestrator.domain.model.fingerprint import callable_fingerprint

LIMIT = 1000


def _reads_the_module_constant(amount: int) -> bool:
    return amount > LIMIT


def _with_limit(limit: int) -> Any:
    return lambda amount: amount > limit


def test_a_module_constant_is_not_part_of_the_digest(monkeypatch: Any) -> None:
    before = callable_fingerprint(_reads_the_module_constant)
    monkeypatch.setitem(globals(), "LIMIT", 5000)
    assert callable_fingerprint(_reads_the_module_constant) == before


def test_a_closure_value_a_default_and_a_literal_are() -> None:
    assert callable_fingerprint(_with_limit(1000)) != callable_fingerprint(_with_limit(5000))

    def by_default(amount: int, limit: int = 1000) -> bool:
        return amount > limit

    def other_default(amount: int, limit: int = 5000) -> bool:
        return amount > limit

    def literal(amount: int) -> bool:
        return amount > 1000

    def other_literal(amount: int) -> bool:
        return amount > 5000

    assert callable_fingerprint(by_default)["code"] != callable_fingerprint(other_default)["code"]
    assert callable_fingerprint(literal)["code"] != callable_fingerprint(other_literal)["code"]
