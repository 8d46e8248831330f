"""Moved to ``ops/bench.py``, out of the product's import path.

Old imports (``from orchestrator.bench import run_bench``) still work: names are looked up
in ``ops.bench`` on first use, so importing this module imports no example application.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import ops.bench

    return getattr(ops.bench, name)
