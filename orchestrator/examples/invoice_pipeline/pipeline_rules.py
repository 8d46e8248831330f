"""The pipeline's deterministic checks: pure functions of the extracted fields, so any
verdict can be computed again at any time and give the same answer (the reference text's
validation stage). A failed check routes the invoice to a person, never to a retry."""

from __future__ import annotations

from typing import Any

#: Suppliers the company buys from (a real deployment reads its vendor master; a change
#: to this list is a change to the definition: give it a new version).
KNOWN_SUPPLIERS = frozenset(
    {
        "ACME Office Supplies",
        "Blue Harbor Logistics",
        "Cobalt Cloud Services",
        "Delta Catering",
        "Evergreen Facilities",
        "Fjord Legal Partners",
    }
)
ALLOWED_CURRENCIES = frozenset({"EUR", "USD", "GBP", "CHF"})
#: Amounts compare to the cent.
TOLERANCE = 0.005
#: Above this total a person approves the exact posting.
APPROVAL_THRESHOLD = 1000.0


def invoice_key(fields: dict[str, Any]) -> str:
    """The business identity of an invoice: its supplier and its number."""
    return f"{fields['supplier'].strip().lower()}|{fields['invoice_number'].strip().upper()}"


def problems(fields: dict[str, Any]) -> list[str]:
    """Every way the fields fail the rules, in a fixed order (empty: they pass)."""
    found = []
    if fields["supplier"] not in KNOWN_SUPPLIERS:
        found.append(f"supplier {fields['supplier']!r} is not a known supplier")
    if fields["currency"] not in ALLOWED_CURRENCIES:
        allowed = ", ".join(sorted(ALLOWED_CURRENCIES))
        found.append(f"currency {fields['currency']} is not one of {allowed}")
    lines = round(sum(item["amount"] for item in fields["line_items"]), 2)
    if abs(lines - fields["net"]) > TOLERANCE:
        found.append(f"line items add up to {lines:.2f}, not the net {fields['net']:.2f}")
    if abs(fields["net"] + fields["tax"] - fields["total"]) > TOLERANCE:
        found.append(
            f"net {fields['net']:.2f} + tax {fields['tax']:.2f} is not the total "
            f"{fields['total']:.2f}"
        )
    if fields["total"] <= 0:
        found.append(f"total {fields['total']:.2f} is not positive")
    return found
