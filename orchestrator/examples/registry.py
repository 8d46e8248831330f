"""The one application every bundled example registers on (``orchestrator.examples:app``).

A module of its own so that the examples in this package (``approvals``, ``invoices``,
``travel``) register on it without importing the package that imports them.
"""

from __future__ import annotations

from orchestrator import KeelApp

__all__ = ["app"]

app = KeelApp("keel-examples")
