"""Refused commands: recorded in the live run's history, else counted and logged; never
dead letters (docs/activities.md, "Dead letters").

A command the decider refuses (``CommandRejected``) is the sender's problem, not the
log's: a live run records ``CommandRefused`` (where its sender reads the answer,
``orchestrator/client/human_task_decisions.py``); a finished run records nothing more
and an unknown workflow has no history, so those refusals, and a redelivery of one the
run has recorded, are counted (``refused_commands`` in the health report) and logged, at
most ``LOG_LINES`` a minute.
"""

from __future__ import annotations

import logging
from typing import Any

from orchestrator.domain.model.messages import Envelope
from orchestrator.domain.model.state import WorkflowState
from orchestrator.engine.runtime_context import RuntimeContext

__all__ = ["LOG_LINES", "Refusals"]

log = logging.getLogger("keel.orchestrator")

#: Refusals of finished or unknown runs logged a minute, at most (the rest are counted).
LOG_LINES = 20


class Refusals:
    """Turns one refusal into the events that record it (none when nothing can)."""

    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self._minute = 0
        self._logged = 0
        self._unlogged = 0

    def record(
        self, state: WorkflowState | None, cmd: Envelope[Any], now: int, reason: str
    ) -> tuple[WorkflowState | None, list[Envelope[Any]]]:
        """The run's new state and its ``CommandRefused``; ``(state, [])`` when the run is
        finished or unknown, or has recorded this command already."""
        self.ctx.stats.refused += 1
        if state is not None and not state.is_terminal and not state.has_seen(cmd.message_id):
            try:
                return self.ctx.decider.refuse(state, cmd, now, reason)
            except Exception as exc:  # e.g. a full history: the refusal stays a log line
                reason = f"{reason} (not recorded: {type(exc).__name__}: {exc})"
        self._log(cmd, now, reason)
        return state, []

    def _log(self, cmd: Envelope[Any], now: int, reason: str) -> None:
        minute = now // 60_000
        if minute != self._minute:
            if self._unlogged:
                log.info("%d more refused commands not logged", self._unlogged)
            self._minute, self._logged, self._unlogged = minute, 0, 0
        if self._logged < LOG_LINES:
            self._logged += 1
            log.info("command %s refused: %s", cmd.message_id[:200], reason[:500])
        else:
            self._unlogged += 1
