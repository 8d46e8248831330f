"""Parked commands go out again by themselves once a process that has their version runs.

A process without a run's version keeps the run's commands in ``keel.dlq`` with a reason
starting ``parked:`` that names the run's (name, version)
(orchestrator/domain/lifecycle/missing_versions.py). When an orchestrator is assigned partitions
(at start and on every rebalance), it looks for open parked letters of those partitions whose
version it has, and redrives them the way ``keel dlq redrive`` does (a Redis claim each, then
the records and their markers in one Kafka transaction; orchestrator/client/dead_letters.py),
so each goes out at most once even when two processes look at the same time. The look happens on a
background thread: the poll loop does not wait for the dlq to be read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable

from orchestrator.client.dead_letters import DeadLetters, Letter, LetterKind, LetterState
from orchestrator.domain.lifecycle.missing_versions import parked_version

__all__ = ["ParkedRedrive", "parked_to_redrive"]

log = logging.getLogger("keel.orchestrator")


def parked_to_redrive(
    letters: Iterable[Letter],
    have: Collection[tuple[str, int]],
    partitions: Collection[int],
    commands_topic: str,
) -> list[Letter]:
    """The open parked letters of ``partitions`` whose (name, version) is in ``have``,
    in dlq order (a run's commands keep their order)."""
    out = []
    for letter in letters:
        if letter.kind != LetterKind.RECORD or letter.state != LetterState.OPEN:
            continue
        if letter.source_topic != commands_topic or letter.source_partition not in partitions:
            continue
        wanted = parked_version(letter.reason)
        if wanted is not None and wanted in have:
            out.append(letter)
    return out


class ParkedRedrive:
    """Redrives the parked letters an orchestrator can now decide (see the module doc)."""

    def __init__(self, letters: DeadLetters, have: Collection[tuple[str, int]]) -> None:
        self.letters = letters
        self.settings = letters.settings
        self.have = frozenset(have)
        self._lock = threading.Lock()
        #: Letters redriven by this process (for health and tests).
        self.redriven = 0

    def redrive_soon(self, partitions: list[int]) -> threading.Thread:
        """Look for parked letters of ``partitions`` on a background thread."""
        thread = threading.Thread(
            target=self.redrive, args=(partitions,), name="keel-parked-redrive", daemon=True
        )
        thread.start()
        return thread

    def redrive(self, partitions: list[int]) -> list[str]:
        """Redrive the parked letters of ``partitions`` this process can decide; their ids."""
        with self._lock:  # one look at a time: a second assignment waits for the first
            try:
                letters = self.letters.letters(include_closed=False)
                due = parked_to_redrive(
                    letters, self.have, set(partitions), self.settings.topic("commands")
                )
                if not due:
                    return []
                done = self.letters.redrive_each(due)
            except Exception as exc:  # the dlq or Redis unreachable: the operator can redrive
                log.warning("parked commands not redriven (%s): %s", type(exc).__name__, exc)
                return []
            self.redriven += len(done)
            log.info("redrove %d parked commands of partitions %s", len(done), partitions)
            return done
