"""``replay``: check the current code against a recorded history, as ``keel replay-check``
does (docs/versioning.md), from a test.

Each run is decided again, command by command, from the state its own events fold to,
and the new events are compared with the recorded ones
(``orchestrator.domain.history.replay``). Task-token hashes depend on the deployment's
key, not on the code, so the recorded ones are used, as the command does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.application.app import KeelApp, decider_of
from orchestrator.client.history_io import read_history_dir, read_history_file
from orchestrator.domain.history.replay import RunReport, replay_history
from orchestrator.domain.model.messages import Envelope
from orchestrator.testing.kit_errors import ReplayDivergedError
from orchestrator.trust.human_task_tokens import recorded_token_hashes

__all__ = ["replay"]

History = Iterable[Envelope[Any]] | str | Path


def _envelopes(history: History) -> list[Envelope[Any]]:
    if isinstance(history, str | Path):
        path = Path(history)
        return list(read_history_dir(path)) if path.is_dir() else read_history_file(path)
    return list(history)


def _event(d: dict[str, Any] | None) -> str:
    return "(no event)" if d is None else json.dumps(d, ensure_ascii=False)


def replay(app: KeelApp, history: History) -> list[RunReport]:
    """Replay ``history`` (envelopes, e.g. ``RunHandle.history()``, or an exported
    ``.jsonl`` file or a folder of them) with ``app``'s definitions; every run's report.

    Raises :class:`ReplayDivergedError` naming the first differing event of the first run
    that diverges: what it recorded, and what the code decides now.
    """
    envelopes = _envelopes(history)
    reports = replay_history(decider_of(app, recorded_token_hashes(envelopes)), envelopes)
    diverged = [r for r in reports if not r.ok]
    if diverged:
        first = diverged[0]
        d = first.divergence
        assert d is not None
        deciding = f" deciding {d.command}" if d.command else ""
        edited = (
            f"; the definition was edited in place (digest {first.recorded_digest[:12]} "
            f"recorded, {first.current_digest[:12]} now)"
            if first.digest_changed
            else ""
        )
        raise ReplayDivergedError(
            f"{len(diverged)} of {len(reports)} run(s) diverge; first: workflow "
            f"'{first.workflow_id}' ({first.name} v{first.version}) at seq {d.seq}{deciding}"
            f"{edited}" + (f"\n  {d.note}" if d.note else "") + f"\n  expected: "
            f"{_event(d.expected)}\n  got:      {_event(d.got)}",
            list(reports),
        )
    return reports
