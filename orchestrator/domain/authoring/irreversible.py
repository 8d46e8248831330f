"""Which compensable steps may run after an irreversible one (docs/sagas.md).

A failure after an irreversible step (an e-mail sent, a payment settled) undoes the
compensable steps but not that one, so the run ends half undone. The definition
validator therefore refuses a compensable step that may run after an irreversible one
unless the definition opts in. "May run after" is read from the structure alone:

* in the same state visit, a step that depends (transitively, ``after=``) on it;
* any step of a state reachable from the irreversible step's state (transitions,
  ``on_failure``, a signal wait's ``on_timeout``, a human task's outcomes), the state
  itself included when a loop leads back to it.

:func:`validate_compensations` reads a definition duck-typed (its ``states``, their
``steps``, ``transitions``, ``on_failure`` and ``wait``), so this module sits below the
definition classes it checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.vocabulary import OnCancel

__all__ = ["StepNode", "effects_after_irreversible", "successors", "validate_compensations"]


@dataclass(frozen=True, slots=True)
class StepNode:
    name: str
    after: tuple[str, ...]
    compensable: bool
    irreversible: bool


def _reachable(start: str, successors: Mapping[str, set[str]]) -> set[str]:
    """States reachable from ``start`` by one transition or more (``start`` only via a loop)."""
    seen: set[str] = set()
    todo = list(successors.get(start, ()))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(successors.get(name, ()))
    return seen


def _descendants(steps: Sequence[StepNode], root: str) -> set[str]:
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for s in steps:
            if s.name not in out and (root in s.after or out.intersection(s.after)):
                out.add(s.name)
                changed = True
    return out


def effects_after_irreversible(
    states: Mapping[str, Sequence[StepNode]], successors: Mapping[str, set[str]]
) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The first ``((state, compensable step), (state, irreversible step))`` where the
    compensable step may run after the irreversible one, in declaration order; None."""
    for i_state, steps in states.items():
        for irr in steps:
            if not irr.irreversible:
                continue
            later = _reachable(i_state, successors)
            same = _descendants(steps, irr.name)
            for s in steps:
                if s.compensable and (s.name in same or i_state in later):
                    return (i_state, s.name), (i_state, irr.name)
            for c_state, c_steps in states.items():
                if c_state == i_state or c_state not in later:
                    continue
                for s in c_steps:
                    if s.compensable:
                        return (c_state, s.name), (i_state, irr.name)
    return None


def successors(defn: Any) -> dict[str, set[str]]:
    """The states each state may lead to: transitions, ``on_failure``, a signal wait's
    ``on_timeout`` and a human task's outcomes (a wait is known by its attributes)."""
    out: dict[str, set[str]] = {}
    for st in defn.states.values():
        nxt = {t.to for t in st.transitions}
        if st.on_failure is not None:
            nxt.add(st.on_failure)
        w = st.wait
        for attr in ("on_timeout", "on_approve", "on_reject", "on_expiry"):
            target = getattr(w, attr, None)
            if isinstance(target, str):
                nxt.add(target)
        out[st.name] = {n for n in nxt if n in defn.states}
    return out


def validate_compensations(defn: Any, compensation_type: Any) -> None:
    """The definition's compensation options and each step's ``compensation`` /
    ``irreversible``; a compensable step that may run after an irreversible one is
    refused, with the reason, unless ``compensation_after_irreversible``."""
    label = defn.label
    if defn.on_cancel not in tuple(OnCancel):
        raise DefinitionError(
            f"{label}: on_cancel must be one of {', '.join(OnCancel)}; got {defn.on_cancel!r}"
        )
    if not isinstance(defn.compensation_role, str) or not defn.compensation_role:
        raise DefinitionError(f"{label}: compensation_role must be a role name")
    graph: dict[str, list[StepNode]] = {}
    for st in defn.states.values():
        nodes = graph[st.name] = []
        for step in st.steps:
            what = f"{label}: state '{st.name}': step '{step.name}'"
            comp: Any = step.compensation
            if comp is not None and not isinstance(comp, compensation_type):
                raise DefinitionError(f"{what}: compensation must be a Compensation")
            if comp is not None and step.irreversible:
                raise DefinitionError(
                    f"{what}: is irreversible and has a compensation (choose one)"
                )
            if comp is not None:
                if not isinstance(comp.activity, str) or not comp.activity:
                    raise DefinitionError(f"{what}: compensation has no activity type")
                if comp.input is not None and not callable(comp.input):
                    raise DefinitionError(f"{what}: compensation input must be a function")
            nodes.append(
                StepNode(step.name, tuple(step.after), comp is not None, step.irreversible)
            )
    if defn.compensation_after_irreversible:
        return
    found = effects_after_irreversible(graph, successors(defn))
    if found is not None:
        (c_state, c_step), (i_state, i_step) = found
        raise DefinitionError(
            f"{label}: step '{c_step}' (state '{c_state}') is compensable but may run after "
            f"irreversible step '{i_step}' (state '{i_state}'): a failure after it would undo "
            f"'{c_step}' but cannot undo '{i_step}'; put irreversible steps last, or pass "
            "compensation_after_irreversible=True to accept that"
        )
