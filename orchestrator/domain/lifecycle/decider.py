"""The decider: one small facade over ``command_handlers`` (events from commands) and ``evolve``
(state from events), compiled from a set of workflow definitions.

Both are pure and deterministic; see :mod:`orchestrator.domain.lifecycle.command_handlers`,
:mod:`orchestrator.domain.lifecycle.evolve` and, for activities,
:mod:`orchestrator.domain.lifecycle.activities`. The names the runtime has always imported from
here are re-exported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.domain.authoring import migrations
from orchestrator.domain.authoring.definitions import WorkflowDefinition, index_definitions
from orchestrator.domain.lifecycle import evolve as _evolve
from orchestrator.domain.lifecycle.activities import (
    FAILURE_CLASSES,
    QUERY_RETRY,
    RESOLUTIONS,
    TIMEOUT_ERROR_TYPES,
    activity_timeout,
    query_outcome,
    retry_delay_ms,
)
from orchestrator.domain.lifecycle.command_handlers import (
    MAX_TRANSITIONS_PER_DECISION,
    Decision,
    decide,
)
from orchestrator.domain.lifecycle.human_tasks import TaskTokenHash
from orchestrator.domain.lifecycle.refusals import MAX_REFUSAL_CHARS, describe_command
from orchestrator.domain.model.errors import CommandRejected, DefinitionError, HistoryError
from orchestrator.domain.model.messages import (
    ActivityRedriven,
    ActivityResolved,
    CommandRefused,
    CompensationStarted,
    Envelope,
    Event,
    HumanTaskDecided,
    SignalReceived,
    SignalRefused,
    StateEntered,
    WorkflowCancelled,
    WorkflowCompensated,
    WorkflowCompensationFailed,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowMigrated,
    WorkflowStarted,
    WorkflowTerminated,
)
from orchestrator.domain.model.state import WorkflowState, remember_command
from orchestrator.domain.model.vocabulary import WorkflowStatus

__all__ = [
    "FAILURE_CLASSES",
    "MAX_TRANSITIONS_PER_DECISION",
    "QUERY_RETRY",
    "RESOLUTIONS",
    "SUMMARY_EVENTS",
    "TIMEOUT_ERROR_TYPES",
    "CommandRejected",
    "Decider",
    "HistoryError",
    "activity_timeout",
    "query_outcome",
    "retry_delay_ms",
]

#: The only events ``Decider.summarize`` reads (a rebuild decodes just these for a finished run).
SUMMARY_EVENTS: tuple[type, ...] = (
    WorkflowStarted,
    StateEntered,
    SignalReceived,
    ActivityResolved,
    ActivityRedriven,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
    WorkflowTerminated,
    SignalRefused,
    HumanTaskDecided,
    WorkflowContinuedAsNew,
    CompensationStarted,
    WorkflowCompensated,
    WorkflowCompensationFailed,
    WorkflowMigrated,
    CommandRefused,
)
#: Events whose command a run remembers (a redelivery of it writes nothing).
_REMEMBERED = (
    SignalReceived,
    SignalRefused,
    CommandRefused,
    ActivityResolved,
    ActivityRedriven,
    HumanTaskDecided,
    CompensationStarted,
)


class Decider:
    """The one deterministic decider compiled from a set of workflow definitions."""

    def __init__(
        self,
        definitions: Iterable[WorkflowDefinition] | Mapping[tuple[str, int], WorkflowDefinition],
        *,
        task_token_hash: TaskTokenHash | None = None,
    ) -> None:
        """``task_token_hash(task_id)`` is the sha256 hex of the token the runtime issues
        for a human task (docs/human-tasks.md); the decider records only that hash."""
        defs = definitions.values() if isinstance(definitions, Mapping) else definitions
        self.definitions = index_definitions(defs)
        self.task_token_hash = task_token_hash
        _check_children(self.definitions)

    def decide(self, state: WorkflowState | None, command: Envelope[Any]) -> list[Event]:
        """The events ``command`` causes (``[]`` for duplicates); raises CommandRejected."""
        _, envs = decide(
            self.definitions,
            self.definition_for,
            state,
            command,
            command.recorded_at,
            self.task_token_hash,
        )
        return [env.payload for env in envs]

    def handle(
        self, state: WorkflowState | None, command: Envelope[Any], now_ms: int
    ) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        """Decide, wrap each event in its envelope (recorded at ``now_ms``) and fold them."""
        return decide(
            self.definitions, self.definition_for, state, command, now_ms, self.task_token_hash
        )

    def refuse(
        self, state: WorkflowState, command: Envelope[Any], now_ms: int, reason: str
    ) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        """Record that the live run ``state`` refused ``command`` (``CommandRefused``, see
        :mod:`orchestrator.domain.lifecycle.refusals`): one event, folded."""
        if len(reason) > MAX_REFUSAL_CHARS:
            reason = reason[: MAX_REFUSAL_CHARS - 1] + "…"
        p = command.payload
        d = Decision(
            self.definition_for,
            self.definition_for(state),
            state,
            command,
            now_ms,
            state.run_id,
            self.task_token_hash,
        )
        d.emit(
            CommandRefused(command.message_id, type(p).__name__, describe_command(p)[:400], reason)
        )
        return d.finish()

    def evolve(self, state: WorkflowState | None, event: Envelope[Any]) -> WorkflowState:
        """Fold one event without changing ``state``; an event at or below ``state.seq`` is
        already in and is ignored. To fold many, :meth:`fold` is linear."""
        return _evolve.evolve(self.definition_for, state, event)

    def fold(
        self, events: Iterable[Envelope[Any]], state: WorkflowState | None = None
    ) -> WorkflowState | None:
        """Fold a history (or its tail after a snapshot) into a state, with one copy."""
        return _evolve.fold(self.definition_for, events, state)

    def summarize(
        self, base: WorkflowState | None, events: Iterable[Envelope[Any]]
    ) -> WorkflowState:
        """The :meth:`WorkflowState.summary` of a finished run, without folding its history.

        ``events`` are the run's events after ``base`` (or from ``WorkflowStarted`` when
        ``base`` is None), of which only :data:`SUMMARY_EVENTS` are needed, in order:
        ``WorkflowStarted``, the last ``StateEntered``, every event whose command is
        remembered (signals, resolutions, redrives, decisions), every
        ``WorkflowContinuedAsNew`` and the terminal event. Used to rebuild finished runs
        quickly; equal to ``fold(all).summary()`` (tested).
        """
        it = iter(events)
        state = base
        if state is None:
            state = self.evolve(None, next(it))
        current, seen = state.current_state, state.seen_commands
        end: Envelope[Any] | None = None
        for env in it:
            if env.seq <= state.seq:
                continue
            p = env.payload
            if isinstance(p, StateEntered):
                current = p.state
            elif isinstance(p, _REMEMBERED) and env.causation_id is not None:
                seen = remember_command(seen, env.causation_id)
            elif isinstance(p, WorkflowMigrated):
                moved = state.clone()
                moved.seen_commands = seen
                migrations.APPLIERS[WorkflowMigrated](None, moved, p, env)
                state, seen = moved, moved.seen_commands
            elif isinstance(p, WorkflowContinuedAsNew):
                ended = state.clone()
                ended.seen_commands = seen
                state = _evolve.continued(ended, p, env)
                current, seen = None, state.seen_commands
            elif getattr(p, "TERMINAL", False):
                end = env
        if end is None:
            raise HistoryError(f"workflow '{state.workflow_id}': no terminal event to summarize")
        p = end.payload
        done = state.clone()
        done.seq, done.updated_at, done.current_state = end.seq, end.recorded_at, current
        done.seen_commands = seen
        if isinstance(p, WorkflowCompleted):
            done.status, done.output_json = WorkflowStatus.COMPLETED, p.output_json
        elif isinstance(p, WorkflowFailed):
            done.status, done.failure_reason = WorkflowStatus.FAILED, p.reason
        elif isinstance(p, WorkflowCompensated):
            done.status, done.failure_reason = WorkflowStatus.COMPENSATED, p.reason
        elif isinstance(p, WorkflowCompensationFailed):
            done.status, done.failure_reason = WorkflowStatus.COMPENSATION_FAILED, p.reason
        else:
            cancelled = isinstance(p, WorkflowCancelled)
            done.status = WorkflowStatus.CANCELLED if cancelled else WorkflowStatus.TERMINATED
            done.cancel_reason = p.reason
            if end.causation_id is not None:
                done.seen_commands = remember_command(seen, end.causation_id)
        return done.summary()

    def definition_for(self, state: WorkflowState) -> WorkflowDefinition:
        found = self.definitions.get((state.name, state.version))
        if found is None:
            raise HistoryError(
                f"workflow '{state.workflow_id}' runs '{state.name}' v{state.version}, "
                "which this application does not define"
            )
        return found


def _check_children(definitions: Mapping[tuple[str, int], WorkflowDefinition]) -> None:
    """Every child-workflow step starts a workflow of this set (else a parent would wait
    for a child no orchestrator can start): ``DefinitionError`` naming the step."""
    for defn in definitions.values():
        for step in defn.steps_by_name.values():
            child, version = step.child_workflow, step.child_version
            if child is None or any(n == child and version in (None, v) for n, v in definitions):
                continue
            wanted = f"'{child}'" + (f" v{version}" if version is not None else "")
            raise DefinitionError(
                f"{defn.label}: step '{step.name}' starts child workflow {wanted}, which "
                "this application does not define"
            )
