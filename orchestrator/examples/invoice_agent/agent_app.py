"""The all-agent invoice variant's application (``orchestrator.examples.invoice_agent:app``),
apart so the modules of the package register on it without importing the package."""

from __future__ import annotations

from orchestrator import KeelApp

__all__ = ["app"]

app = KeelApp("keel-invoice-agent")
