"""Naming an activity by its handler function instead of its type's name.

``@app.activity`` records the type it registered on the function (:func:`mark_activity`),
so a definition may say ``Step("reserve", reserve_stock)``: the step still holds the
name ``"reserve_stock"`` (the same step, the same digest as the string form), and a
typed read (``ctx.result(reserve_stock)``) knows the model its result is read as. A
function that was never registered is refused when the step is built, naming it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from orchestrator.domain.model.errors import DefinitionError

__all__ = [
    "ActivityFunction",
    "ActivityRef",
    "activity_ref",
    "activity_type_of",
    "function_name",
    "mark_activity",
]

#: A registered activity handler, sync or async, as a step may name it.
ActivityFunction = Callable[..., Any]

#: The attribute ``@app.activity`` sets on the function (like Temporal's
#: ``__temporal_activity_definition``).
_ATTRIBUTE = "__keel_activity__"


@dataclass(frozen=True)
class ActivityRef:
    """What registering a function recorded: its activity type(s) and output model."""

    types: tuple[str, ...]
    output: type[BaseModel] | None = None


def mark_activity(fn: Any, activity_type: str, output: type[BaseModel] | None) -> None:
    """Record on ``fn`` that it handles ``activity_type`` (a function registered under
    two types keeps both, and a step must then name the type as a string)."""
    known = activity_ref(fn)
    types = known.types if known is not None else ()
    if activity_type not in types:
        types = (*types, activity_type)
    with contextlib.suppress(AttributeError, TypeError):  # a bound method: names only
        setattr(fn, _ATTRIBUTE, ActivityRef(types, output))


def activity_ref(fn: Any) -> ActivityRef | None:
    """What ``@app.activity`` recorded on ``fn`` (None: never registered)."""
    ref = getattr(fn, _ATTRIBUTE, None)
    return ref if isinstance(ref, ActivityRef) else None


def function_name(fn: Any) -> str:
    """How an error names a function (its qualified name)."""
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def activity_type_of(activity: str | ActivityFunction, what: str) -> str:
    """The activity type ``activity`` names: a type name as it is, a handler function by
    its registration (``what``: the place, for the error)."""
    if isinstance(activity, str):
        return activity
    ref = activity_ref(activity)
    name = function_name(activity)
    if ref is None:
        raise DefinitionError(
            f"{what}: function '{name}' is not a registered activity "
            "(decorate it with @app.activity, or name the activity type as a string)"
        )
    if len(ref.types) != 1:
        raise DefinitionError(
            f"{what}: function '{name}' is registered as activity types "
            f"{', '.join(repr(t) for t in ref.types)}; name the one meant as a string"
        )
    return ref.types[0]
