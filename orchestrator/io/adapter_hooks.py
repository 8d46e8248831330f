"""Adapter hooks: decorators a process's composition root puts around its parts once, when
it builds them (docs/configuration.md, ``KEEL_ADAPTER_HOOKS``).

A hook receives the part a service is about to use and returns what it uses instead:
the part itself by default, or a wrapper that traces it, or one that misbehaves on
purpose. ``keel evaluate``'s seeded bug and the fault tests' pauses are such wrappers
(``ops/faults/``), so the engine, the worker and the connector hold no test branch on
their hot paths: they call their parts, never a hook.

The parts are typed by type variables: a hook must return something that serves the
same calls (a subclass or a wrapper of the same protocol).
"""

from __future__ import annotations

from typing import TypeVar

from orchestrator.io.ports import GroupIntake

__all__ = ["NO_HOOKS", "AdapterHooks"]

D = TypeVar("D")
P = TypeVar("P")
S = TypeVar("S")


class AdapterHooks:
    """Identity for every part; subclass and override the hooks you need."""

    def decider(self, decider: D) -> D:
        """The orchestrator's decider (``handle(state, command, now)``)."""
        return decider

    def task_intake(self, intake: GroupIntake) -> GroupIntake:
        """The worker's consumer of ``activity-tasks``."""
        return intake

    def command_producer(self, producer: P) -> P:
        """The connector's producer of accepted webhooks and decisions (``send``)."""
        return producer

    def llm_call_store(self, store: S) -> S:
        """Where a worker's LLM steps keep each raw provider response."""
        return store

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: What a process uses when ``KEEL_ADAPTER_HOOKS`` names none.
NO_HOOKS = AdapterHooks()
