"""What an application marks its activity handlers with (authoring: no I/O client here).

``@side_effect`` says a handler writes to an external system: the worker then runs it
through the effect store (``handlers/effects.py``), claiming its idempotency key first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["has_side_effect", "side_effect"]

F = TypeVar("F", bound=Callable[..., Any])


def side_effect(fn: F) -> F:
    """Mark an activity handler as writing to an external system (``handlers/effects.py``)."""
    fn.__keel_side_effect__ = True  # type: ignore[attr-defined]
    return fn


def has_side_effect(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__keel_side_effect__", False))
