"""The invoice-lite workload's steps, plain functions both engines call.

Three activities (read the invoice's lines, price them, post the total) and a
deterministic check (the posted total is the lines' sum). Standard library only: the
Restate service imports this module from its own virtual environment, without Keel.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check", "extract", "invoice_for", "post", "price"]


def invoice_for(n: int) -> dict[str, Any]:
    """The input of run ``n``: an invoice of three lines."""
    return {"invoice": f"INV-{n}", "lines": [n % 7 + 1, n % 5 + 2, n % 3 + 3]}


def extract(inp: dict[str, Any]) -> dict[str, Any]:
    """Activity 1: the invoice's lines, as cents."""
    return {"invoice": inp["invoice"], "cents": [100 * x for x in inp["lines"]]}


def price(inp: dict[str, Any]) -> dict[str, Any]:
    """Activity 2: the total, with 20 % tax."""
    net = sum(inp["cents"])
    return {"invoice": inp["invoice"], "net": net, "total": net + net // 5}


def post(inp: dict[str, Any]) -> dict[str, Any]:
    """Activity 3: the posting's receipt."""
    return {"invoice": inp["invoice"], "posted": inp["total"], "receipt": f"R-{inp['invoice']}"}


def check(lines: list[int], posted: dict[str, Any]) -> dict[str, Any]:
    """The deterministic check: what was posted is the lines' sum with tax."""
    net = 100 * sum(lines)
    return {"receipt": posted["receipt"], "ok": posted["posted"] == net + net // 5}
