"""Queries: read-only questions a definition answers about a run's current state.

A definition declares them with ``queries=[Query("progress", fn), ...]``; ``fn(ctx)`` (or
``fn(ctx, args)`` when the query declares an ``args`` model) is a pure function of the
run's state and returns a JSON value. A query is answered from the state the read model
holds (``KeelClient.query``, ``keel workflow query``) and writes nothing: it is not part of
the history, nor of the definition's digest, so adding or changing one needs no new
version and changes no replay (docs/workflows.md, "Queries").

The :class:`QueryContext` a query gets is a :class:`Context` whose every value is a
read-only view: a query that tries to change what it reads (``ctx.results["a"]["b"] = 1``,
``ctx.signals["add"].append(...)``, ``ctx.input.n = 2``) fails with :class:`QueryError`.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.model.errors import (
    DefinitionError,
    InvalidInputError,
    KeelError,
    LimitExceededError,
    format_validation_error,
)
from orchestrator.domain.model.limits import check_payload_size, parse_json
from orchestrator.domain.model.state import WorkflowState

__all__ = [
    "Query",
    "QueryContext",
    "QueryError",
    "ReadOnlyDict",
    "ReadOnlyList",
    "frozen",
    "index_queries",
    "run_query",
]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class QueryError(KeelError):
    """A query failed: it raised, tried to change the run's state, or answered no JSON."""


class _ReadOnly(QueryError):
    """Raised by the read-only views when a query tries to change what it reads."""


@dataclass(frozen=True)
class Query:
    """A read-only question about a run: ``fn(ctx)``, or ``fn(ctx, args)`` with ``args``
    (a pydantic model) validating the caller's JSON arguments. ``fn`` must be pure and
    return a JSON value (a pydantic model is dumped)."""

    name: str
    fn: Callable[..., Any]
    args: type[BaseModel] | None = None


class _Definition(Protocol):
    """The part of a workflow definition a query needs."""

    @property
    def label(self) -> str: ...

    @property
    def queries(self) -> Mapping[str, Query]: ...

    @property
    def input_model(self) -> type[BaseModel]: ...

    @property
    def steps_by_name(self) -> Mapping[str, Any]: ...


def index_queries(label: str, queries: Sequence[Query]) -> dict[str, Query]:
    """The declared queries by name, each checked (a :class:`DefinitionError` otherwise)."""
    out: dict[str, Query] = {}
    for q in queries:
        if not isinstance(q, Query):
            raise DefinitionError(f"{label}: queries must be Query objects, got {q!r}")
        where = f"{label}: query {q.name!r}"
        if not isinstance(q.name, str) or not _NAME_RE.match(q.name):
            raise DefinitionError(f"{where}: invalid name (letters, digits, _.-)")
        if q.name in out:
            raise DefinitionError(f"{label}: duplicate query '{q.name}'")
        if q.args is not None and not (isinstance(q.args, type) and issubclass(q.args, BaseModel)):
            raise DefinitionError(f"{where}: args must be a pydantic BaseModel class")
        if not callable(q.fn) or inspect.iscoroutinefunction(q.fn):
            raise DefinitionError(f"{where}: fn must be a plain function")
        takes = "(ctx, args)" if q.args is not None else "(ctx)"
        try:
            inspect.signature(q.fn).bind(*([None] * (2 if q.args is not None else 1)))
        except TypeError:
            raise DefinitionError(f"{where}: fn must take {takes}") from None
        except ValueError:  # no signature to inspect (a builtin): called as declared
            pass
        out[q.name] = q
    return out


# -- read-only views -------------------------------------------------------------------

#: How a refused change reads in the error (the operator form of each mutating method).
_SPELLED = {
    "__setitem__": "x[k] = v",
    "__delitem__": "del x[k]",
    "__iadd__": "x += ...",
    "__imul__": "x *= ...",
    "__ior__": "x |= ...",
}


def _refusing(kind: str, op: str) -> Callable[..., NoReturn]:
    def refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
        raise _ReadOnly(f"{_SPELLED.get(op, f'.{op}()')} on a {kind}")

    refuse.__name__ = op
    return refuse


class ReadOnlyDict(dict[str, Any]):
    """A mapping a query reads: every change raises."""

    __slots__ = ()


class ReadOnlyList(list[Any]):
    """A list a query reads: every change raises."""

    __slots__ = ()


#: The methods that change a dict or a list, each refused by its read-only view.
_CHANGES: dict[type, tuple[str, str]] = {
    ReadOnlyDict: (
        "mapping",
        "__setitem__ __delitem__ __ior__ clear pop popitem setdefault update",
    ),
    ReadOnlyList: (
        "list",
        "__setitem__ __delitem__ __iadd__ __imul__ append extend insert pop remove clear sort "
        "reverse",
    ),
}
for _cls, (_kind, _ops) in _CHANGES.items():
    for _op in _ops.split():
        setattr(_cls, _op, _refusing(_kind, _op))


@functools.cache
def _frozen_class(cls: type[BaseModel]) -> type[BaseModel] | None:
    """A frozen subclass of ``cls`` (``isinstance`` holds; setting a field raises)."""
    try:
        config = ConfigDict(**{**cls.model_config, "frozen": True})  # type: ignore[typeddict-item]
        attrs = {"model_config": config, "__module__": cls.__module__}
        return type(cls.__name__, (cls,), {**attrs, "__qualname__": cls.__qualname__})
    except Exception:  # a model pydantic cannot subclass: a deep copy, changes unnoticed
        return None


def frozen(value: Any) -> Any:
    """``value`` as a query sees it: mappings, lists and models that refuse every change."""
    if isinstance(value, ReadOnlyDict | ReadOnlyList):
        return value
    if isinstance(value, dict):
        return ReadOnlyDict({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return ReadOnlyList(frozen(v) for v in value)
    if isinstance(value, tuple):
        return tuple(frozen(v) for v in value)
    if isinstance(value, BaseModel) and not value.model_config.get("frozen"):
        cls = _frozen_class(type(value))
        if cls is None:
            return value.model_copy(deep=True)
        fields = {k: frozen(v) for k, v in value}
        return cls.model_construct(_fields_set=value.model_fields_set, **fields)
    return value


class _FrozenResults(Mapping[str, Any]):
    """Step results, read (and upgraded) on first use as the decider reads them, frozen."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Mapping[str, Any]) -> None:
        self._inner = inner

    def __getitem__(self, step: str) -> Any:
        return frozen(self._inner[step])

    def __iter__(self) -> Iterator[str]:
        return iter(self._inner)

    def __len__(self) -> int:
        return len(self._inner)

    def __contains__(self, step: object) -> bool:
        return step in self._inner

    __setitem__ = _refusing("mapping", "__setitem__")
    __delitem__ = _refusing("mapping", "__delitem__")


class QueryContext(Context):
    """What a query reads: a :class:`Context` of read-only views, plus the run's
    ``status``, ``run_id`` and ``output`` (the parsed output of a completed run, else None)."""

    __slots__ = ("_frozen",)

    def __init__(self, definition: _Definition, state: WorkflowState) -> None:
        super().__init__(definition, state)
        self._frozen: dict[str, Any] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            raise _ReadOnly(f"setting ctx.{name}")
        object.__setattr__(self, name, value)

    def _view(self, name: str, read: Callable[[], Any]) -> Any:
        if name not in self._frozen:
            self._frozen[name] = frozen(read())
        return self._frozen[name]

    @property
    def status(self) -> str:
        return str(self._state.status)

    @property
    def run_id(self) -> str:
        return self._state.run_id

    @property
    def output(self) -> Any:
        js = self._state.output_json
        return self._view("output", lambda: parse_json(js)) if js else None

    @property
    def input(self) -> BaseModel:
        return self._view("input", lambda: Context.input.__get__(self))

    @property
    def input_dict(self) -> dict[str, Any]:
        return self._view("input_dict", lambda: Context.input_dict.__get__(self))

    @property
    def results(self) -> Mapping[str, Any]:
        return self._view("results", lambda: _FrozenResults(Context.results.__get__(self)))

    @property
    def signals(self) -> Mapping[str, list[Any]]:
        return self._view("signals", lambda: Context.signals.__get__(self))

    @property
    def visits(self) -> Mapping[str, int]:
        return self._view("visits", lambda: dict(Context.visits.__get__(self)))

    @property
    def human_tasks(self) -> Mapping[str, dict[str, Any]]:
        return self._view("human_tasks", lambda: Context.human_tasks.__get__(self))

    @property
    def failures(self) -> Mapping[str, dict[str, str]]:
        return self._view("failures", lambda: Context.failures.__get__(self))


# -- answering ---------------------------------------------------------------------------


def _declared(definition: _Definition, name: str) -> Query:
    query = definition.queries.get(name)
    if query is None:
        known = ", ".join(f"'{n}'" for n in sorted(definition.queries)) or "none"
        raise InvalidInputError(f"{definition.label} has no query '{name}' (declared: {known})")
    return query


def _arguments(definition: _Definition, query: Query, args: Any) -> tuple[Any, ...]:
    """The arguments ``query.fn`` is called with after the context."""
    what = f"query '{query.name}' of {definition.label}"
    if query.args is None:
        if args is not None:
            raise InvalidInputError(f"{what} takes no args")
        return ()
    try:
        if isinstance(args, BaseModel):
            args = args.model_dump(mode="json")
        return (query.args.model_validate({} if args is None else args),)
    except ValidationError as exc:
        raise InvalidInputError(
            f"invalid args for {what}: {format_validation_error(exc)}"
        ) from None


def _answer_json(value: Any, what: str) -> Any:
    """The answer as plain JSON values (a model dumped), or :class:`QueryError`."""
    try:
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        text = json.dumps(value, allow_nan=False, default=_dump_model)
        check_payload_size(text, f"the answer of {what}")
    except LimitExceededError as exc:
        raise QueryError(str(exc)) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise QueryError(f"{what} answered with a value that is not JSON: {exc}") from None
    return parse_json(text)


def _dump_model(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def run_query(definition: _Definition, state: WorkflowState, name: str, args: Any = None) -> Any:
    """Answer query ``name`` of ``definition`` over ``state`` (never changed): a JSON value.

    An undeclared query or bad ``args`` is an :class:`InvalidInputError`; a query that
    raises, tries to change what it reads or answers no JSON is a :class:`QueryError`.
    """
    query = _declared(definition, name)
    extra = _arguments(definition, query, args)
    what = f"query '{name}' of workflow '{state.workflow_id}'"
    try:
        value = query.fn(QueryContext(definition, state), *extra)
    except _ReadOnly as exc:
        raise QueryError(
            f"{what} tried to change the run's state ({exc}); a query is read-only"
        ) from None
    except ValidationError as exc:
        if any(e.get("type") == "frozen_instance" for e in exc.errors()):
            fields = ", ".join(".".join(map(str, e.get("loc", ()))) for e in exc.errors())
            raise QueryError(
                f"{what} tried to change the run's state (setting field '{fields}' of a "
                "model it read); a query is read-only"
            ) from None
        raise QueryError(f"{what} failed: {format_validation_error(exc)}") from None
    except Exception as exc:
        raise QueryError(f"{what} failed: {type(exc).__name__}: {exc}") from None
    return _answer_json(value, what)
