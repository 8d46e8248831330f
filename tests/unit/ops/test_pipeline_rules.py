"""The invoice pipeline's deterministic checks say exactly what is wrong."""

from __future__ import annotations

from typing import Any

from orchestrator.examples.invoice_pipeline import pipeline_rules as rules


def _fields(**kw: Any) -> dict[str, Any]:
    base = {
        "supplier": "ACME Office Supplies",
        "invoice_number": "inv-1 ",
        "currency": "EUR",
        "net": 100.0,
        "tax": 20.0,
        "total": 120.0,
        "line_items": [{"description": "a", "amount": 60.0}, {"description": "b", "amount": 40}],
    }
    return base | kw


def test_clean_fields_pass_and_the_key_ignores_case_and_spaces() -> None:
    assert rules.problems(_fields()) == []
    assert rules.invoice_key(_fields()) == "acme office supplies|INV-1"


def test_every_failed_rule_is_named_in_order() -> None:
    bad = _fields(supplier="Nobody", currency="JPY", net=90.0, tax=20.0, total=-1.0)
    assert rules.problems(bad) == [
        "supplier 'Nobody' is not a known supplier",
        "currency JPY is not one of CHF, EUR, GBP, USD",
        "line items add up to 100.00, not the net 90.00",
        "net 90.00 + tax 20.00 is not the total -1.00",
        "total -1.00 is not positive",
    ]


def test_amounts_compare_to_the_cent() -> None:
    assert rules.problems(_fields(total=120.004)) == []
    assert rules.problems(_fields(total=120.01)) == [
        "net 100.00 + tax 20.00 is not the total 120.01"
    ]
