"""Search attributes: the business keys a definition declares so its runs can be found.

A definition declares them with ``search_attributes=[SearchAttribute("invoice_number",
SearchKind.KEYWORD, lambda ctx: ctx.input.invoice_number), ...]``. ``of(ctx)`` is a pure
function of the run, given the read-only :class:`~orchestrator.domain.authoring.queries.
QueryContext` a query gets (input, results, state, status, output), and returns a value
of the attribute's kind, or None for "not set":

- ``KEYWORD``: a string, found by equality (``--attr supplier=ACME``);
- ``NUMBER``: an int or float, found by equality or range (``--attr 'amount>=100'``);
- ``TIME``: a :class:`~datetime.datetime` (naive means UTC) or :class:`~datetime.date`,
  found by range in ISO-8601.

They are read-side only (docs/run-search.md): the projector computes them from each run's
state as it folds events and indexes them in the read model. They are in no event and
not in the definition's digest, so adding or changing one needs no new version and
changes no replay; ``keel projections rebuild`` indexes old runs by the new declaration.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from enum import StrEnum
from typing import Any, Protocol

from orchestrator.domain.authoring.queries import QueryContext, QueryError
from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.state import WorkflowState

__all__ = [
    "MAX_KEYWORD_CHARS",
    "SearchAttribute",
    "SearchKind",
    "SearchValue",
    "compute_search_attributes",
    "index_search_attributes",
    "search_value",
]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")

#: The longest keyword value indexed (a longer one is left out, with a reason).
MAX_KEYWORD_CHARS = 1024

#: An indexed value: a keyword's text, a number, or a time as epoch milliseconds.
SearchValue = str | float | int


class SearchKind(StrEnum):
    """How an attribute's values compare: text equality, or numeric/time order."""

    KEYWORD = "keyword"
    NUMBER = "number"
    TIME = "time"

    @property
    def ordered(self) -> bool:
        """Whether range filters (``>=``, ``<=``) apply."""
        return self is not SearchKind.KEYWORD


@dataclass(frozen=True)
class SearchAttribute:
    """A business key of a run: ``of(ctx)`` (pure, on a read-only context) gives its
    value of kind ``kind``, or None when the run has none (yet)."""

    name: str
    kind: SearchKind
    of: Callable[[QueryContext], Any]


class _Definition(Protocol):
    """The part of a workflow definition a search attribute needs (as a query does)."""

    @property
    def label(self) -> str: ...

    @property
    def search_attributes(self) -> Mapping[str, SearchAttribute]: ...


def index_search_attributes(
    label: str, attributes: Sequence[SearchAttribute]
) -> dict[str, SearchAttribute]:
    """The declared attributes by name, each checked (a :class:`DefinitionError` otherwise)."""
    out: dict[str, SearchAttribute] = {}
    for a in attributes:
        if not isinstance(a, SearchAttribute):
            raise DefinitionError(
                f"{label}: search_attributes must be SearchAttribute objects, got {a!r}"
            )
        where = f"{label}: search attribute {a.name!r}"
        if not isinstance(a.name, str) or not _NAME_RE.match(a.name):
            raise DefinitionError(f"{where}: invalid name (letters, digits, _.-)")
        if a.name in out:
            raise DefinitionError(f"{label}: duplicate search attribute '{a.name}'")
        if a.kind not in tuple(SearchKind):
            kinds = ", ".join(k.value for k in SearchKind)
            raise DefinitionError(f"{where}: kind must be one of {kinds}, got {a.kind!r}")
        if not callable(a.of) or inspect.iscoroutinefunction(a.of):
            raise DefinitionError(f"{where}: of must be a plain function of (ctx)")
        try:
            inspect.signature(a.of).bind(None)
        except TypeError:
            raise DefinitionError(f"{where}: of must take (ctx)") from None
        except ValueError:  # no signature to inspect (a builtin): called as declared
            pass
        out[a.name] = SearchAttribute(a.name, SearchKind(a.kind), a.of)
    return out


def search_value(kind: SearchKind, value: Any) -> SearchValue:
    """``value`` as the index holds it for ``kind``; :class:`ValueError` saying why not."""
    if kind is SearchKind.KEYWORD:
        if not isinstance(value, str):
            raise ValueError(f"a keyword must be a string, got {type(value).__name__}")
        if len(value) > MAX_KEYWORD_CHARS:
            raise ValueError(f"a keyword is at most {MAX_KEYWORD_CHARS} characters")
        return value
    if kind is SearchKind.NUMBER:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"a number must be an int or a float, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"a number must be finite, got {value}")
        if isinstance(value, int) and abs(value) > 2**53:
            raise ValueError("an int number is at most 2**53 in size (exact in the index)")
        return value
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return int(aware.timestamp() * 1000)
    if isinstance(value, date):
        return int(datetime.combine(value, time(), UTC).timestamp() * 1000)
    raise ValueError(f"a time must be a datetime or a date, got {type(value).__name__}")


def compute_search_attributes(
    definition: _Definition, state: WorkflowState
) -> tuple[dict[str, SearchValue], dict[str, str]]:
    """The run's attribute values (those set) and, by name, why any could not be computed.

    Never raises: an attribute whose function fails or answers a value of the wrong kind
    is left out of the index, and its reason is kept on the run's row.
    """
    values: dict[str, SearchValue] = {}
    problems: dict[str, str] = {}
    if not definition.search_attributes:
        return values, problems
    ctx = QueryContext(definition, state)  # type: ignore[arg-type]
    for name, attribute in definition.search_attributes.items():
        try:
            raw = attribute.of(ctx)
            if raw is not None:
                values[name] = search_value(attribute.kind, raw)
        except QueryError as exc:  # the read-only views refused a change
            problems[name] = f"tried to change the run's state ({exc}); it is read-only"[:200]
        except Exception as exc:  # a user's function: any failure is the run's problem
            problems[name] = f"{type(exc).__name__}: {exc}"[:200]
    return values, problems
