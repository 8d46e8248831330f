"""A faster ``__init__`` for the frozen, slotted dataclasses on the hot path.

``dataclasses`` gives a frozen class an ``__init__`` that sets each field through
``object.__setattr__`` (the class's own ``__setattr__`` refuses). A run's decisions
create about a hundred such objects (payloads, envelopes, activity states), and under
load their ``__init__`` was a seventh of the orchestrator's GIL
(git show 6f66b40:docs/performance.md,
"The projector's JSON, its Redis write, and frozen objects built faster"). The
``__init__`` made here sets each slot through the slot's own descriptor, which is where
``object.__setattr__`` ends up: the same object, built about twice as fast. The class
stays frozen (assignment still raises ``FrozenInstanceError``), and ``replace``,
``copy`` and ``pickle`` work as before. :func:`replace` is ``dataclasses.replace``, made
the same way for these classes: ``dataclasses.replace`` walks the fields and calls
``__init__`` with them all as keywords each time, and the fold replaces an activity's
state for each of its events.

Only the plain case is taken: every field in ``__init__``, positional, with a default
value or none. Anything else (a default factory, keyword-only or init-less fields,
``InitVar``, ``__post_init__``) is refused when the class is decorated, never guessed.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["fast_init", "replace"]

T = TypeVar("T", bound=type)
D = TypeVar("D")

#: class -> its generated ``replace(obj, changes)``.
_REPLACERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def replace(obj: D, /, **changes: Any) -> D:
    """``dataclasses.replace(obj, **changes)``: the same object, built faster for a
    class decorated with :func:`fast_init` (an exact instance of it)."""
    replacer = _REPLACERS.get(type(obj))
    if replacer is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    return replacer(obj, changes)  # type: ignore[no-any-return]


def fast_init(cls: T) -> T:
    """Give ``cls`` (a frozen dataclass with slots) the faster ``__init__``; returns it."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not params.init or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__")
    generated = vars(cls)["__init__"]
    fields = dataclasses.fields(cls)
    namespace: dict[str, Any] = {}
    arguments, body = [], []
    for f in fields:
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name} is not a plain positional field")
        namespace[f"_set_{f.name}"] = vars(cls)[f.name].__set__
        if f.default is dataclasses.MISSING:
            arguments.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            arguments.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(arguments)}):\n" + ("\n".join(body) or "    pass")
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(generated.__annotations__)
    if inspect.signature(init) != inspect.signature(generated):  # e.g. an InitVar
        raise TypeError(f"{cls.__name__}: the generated __init__ takes other arguments")
    cls.__init__ = init  # type: ignore[misc]
    _REPLACERS[cls] = _replacer(cls, [f.name for f in fields], namespace)
    return cls


def _replacer(
    cls: type, names: list[str], namespace: dict[str, Any]
) -> Callable[[Any, dict[str, Any]], Any]:
    """``replace`` for ``cls``: each slot set from ``changes`` or copied from ``obj``;
    an unknown name goes to ``dataclasses.replace`` for its own error."""
    namespace.update(_cls=cls, _names=frozenset(names), _new=object.__new__, _dc=dataclasses)
    body = [f"    _set_{n}(new, changes[{n!r}] if {n!r} in changes else obj.{n})" for n in names]
    source = (
        "def replace(obj, changes):\n"
        "    if not changes.keys() <= _names:\n"
        "        return _dc.replace(obj, **changes)\n"
        "    new = _new(_cls)\n" + "\n".join(body) + "\n    return new"
    )
    exec(source, namespace)
    return namespace["replace"]  # type: ignore[no-any-return]
