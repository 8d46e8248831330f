"""Declaring a saga: which events of which workflows it reacts to, how they are
associated, and the commands it emits (docs/sagas.md). Pure: no Kafka here.

A :class:`Saga` names, per workflow name, the event types it reacts to; ``correlate``
maps a workflow's id and start input to the correlation value that associates it with
one saga instance (None: not part of any); ``react`` is a pure function of the instance
so far and the new fact, returning the commands to emit. The saga manager records every
fact routed to an instance in its own log (``<prefix>.sagas``) and rebuilds each
instance by folding those facts again, so ``react`` must be deterministic: the message
id of each command it emits is derived from the fact (a replay emits the same ids, and
the orchestrator writes nothing for a command it has seen).

A workflow's ``WorkflowStarted`` is always routed to the instances it belongs to (so
``SagaView.members`` knows it), whether or not ``react`` cares about it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.messages import CancelWorkflow, SignalWorkflow, StartWorkflow

__all__ = [
    "Command",
    "Emit",
    "Saga",
    "SagaFact",
    "SagaView",
    "command_id",
    "sagas_of",
]

#: The commands a saga may emit (to one workflow each).
Command = StartWorkflow | SignalWorkflow | CancelWorkflow


@dataclass(frozen=True, slots=True)
class SagaFact:
    """One workflow event as a saga sees it; ``data`` is the event's payload fields."""

    workflow_name: str
    workflow_id: str
    event_type: str
    seq: int
    data: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, int]:
        return (self.workflow_id, self.seq)


@dataclass(frozen=True, slots=True)
class Emit:
    """A command for workflow ``workflow_id``."""

    workflow_id: str
    command: Command


@dataclass
class SagaView:
    """One saga instance: its correlation, its member workflows (by workflow name, the
    ids started so far) and every fact routed to it before the one being decided."""

    saga: str
    correlation: str
    members: dict[str, list[str]] = field(default_factory=dict)
    facts: list[SagaFact] = field(default_factory=list)
    seen: set[tuple[str, int]] = field(default_factory=set)

    def has(self, workflow_name: str, event_type: str) -> bool:
        """Whether an event of this type of a workflow of this name was seen."""
        return any(
            f.workflow_name == workflow_name and f.event_type == event_type for f in self.facts
        )

    def add(self, fact: SagaFact) -> bool:
        """Fold ``fact`` in; False when it is already in (a replayed fact)."""
        if fact.key in self.seen:
            return False
        self.seen.add(fact.key)
        self.facts.append(fact)
        if fact.event_type == "WorkflowStarted":
            ids = self.members.setdefault(fact.workflow_name, [])
            if fact.workflow_id not in ids:
                ids.append(fact.workflow_id)
        return True


React = Callable[[SagaView, SagaFact], list[Emit]]
Correlate = Callable[[str, Mapping[str, Any]], str | None]


@dataclass(frozen=True)
class Saga:
    """A process manager across workflows (docs/sagas.md)."""

    name: str
    reacts_to: Mapping[str, Collection[str]]
    correlate: Correlate
    react: React

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise DefinitionError(f"saga name {self.name!r} must be non-empty, without '/'")
        if not self.reacts_to:
            raise DefinitionError(f"saga '{self.name}' reacts to no workflow")
        frozen = {wf: frozenset(types) for wf, types in self.reacts_to.items()}
        object.__setattr__(self, "reacts_to", frozen)

    def wants(self, workflow_name: str, event_type: str) -> bool:
        types = self.reacts_to.get(workflow_name)
        return types is not None and (event_type in types or event_type == "WorkflowStarted")

    def decide(self, view: SagaView, fact: SagaFact) -> list[Emit]:
        """The commands ``fact`` causes (none for a start the saga did not ask for)."""
        if fact.event_type not in self.reacts_to.get(fact.workflow_name, ()):
            return []
        out = self.react(view, fact)
        for e in out:
            if not isinstance(e, Emit) or not isinstance(e.command, Command):
                raise TypeError(f"saga '{self.name}' must emit Emit(workflow_id, command)")
        return out


def command_id(saga: str, correlation: str, fact: SagaFact, i: int) -> str:
    """The deterministic message id of the ``i``-th command a fact causes."""
    return f"saga/{saga}/{json.dumps(correlation)}/{fact.workflow_id}/{fact.seq}/{i}"


def sagas_of(app: Any) -> dict[str, Saga]:
    """The sagas declared on an application (``app.saga``, a ``KeelApp``), by name."""
    sagas: dict[str, Saga] = app.sagas
    return sagas
