"""``keel workflow migrate``'s two halves: a dry run that writes nothing, and a send that
learns what the orchestrator decided (docs/versioning.md, "Migrate").

* :meth:`Migrations.plan` rebuilds each run from ``keel.events``, decides ``MigrateWorkflow`` on it
  with this application's decider (pure: nothing is produced anywhere) and replays the
  run's recorded history as if it had started on the target version
  (:func:`orchestrator.domain.history.replay.replay_on_version`): where that version would have
  decided differently.
* :meth:`Migrations.send` publishes ``MigrateWorkflow`` (with the ``from_version`` and ``to_digest``
  the operator checked) and watches two places until one answers, as a human-task
  decision does (:mod:`orchestrator.client.human_task_decisions`): the run's history in the
  read model (``WorkflowMigrated`` → migrated) and the orchestrator's refusals
  (``CommandRefused`` → refused, with its reason). A run that ends first records no
  refusal (docs/versioning.md, "Migrate"): its end is the answer (refused, as the
  orchestrator refuses a finished run), not a wait for the timeout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from orchestrator.application.app import KeelApp, decider_of
from orchestrator.client.awaiting import send_and_await
from orchestrator.client.history_io import read_topic_history
from orchestrator.client.human_task_decisions import RefusalWatch
from orchestrator.config.settings import Settings
from orchestrator.domain.history.replay import (
    RunReport,
    group_runs,
    payload_dict,
    replay_on_version,
)
from orchestrator.domain.model.errors import CommandRejected, NotFoundError
from orchestrator.domain.model.messages import Envelope, MigrateWorkflow, WorkflowMigrated
from orchestrator.domain.model.state import TERMINAL_STATUSES
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.clock import Clock
from orchestrator.records.envelopes import command_envelope, now_ms
from orchestrator.trust.human_task_tokens import recorded_token_hashes

__all__ = ["MigrationOutcome", "MigrationPlan", "Migrations", "Outcome"]


class Outcome(StrEnum):
    WOULD_MIGRATE = "would_migrate"  # dry run: the decider records the migration
    MIGRATED = "migrated"
    REFUSED = "refused"
    PENDING = "pending"  # sent; no answer within the wait


@dataclass
class MigrationPlan:
    """What migrating one run would do, decided on its rebuilt state."""

    workflow_id: str
    name: str
    from_version: int
    to_version: int
    to_digest: str
    status: str
    from_state: str
    outcome: Outcome
    to_state: str = ""
    reason: str = ""
    #: The events the migration would write (type and fields), in order.
    events: list[dict[str, Any]] = field(default_factory=list)
    #: The run's history replayed as if it had started on the target version.
    replay: RunReport | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "replay"}
        d["outcome"] = str(self.outcome)
        d["replay"] = None if self.replay is None else self.replay.to_dict()
        return d


@dataclass
class MigrationOutcome:
    """What the orchestrator made of one sent ``MigrateWorkflow``."""

    workflow_id: str
    outcome: Outcome
    message_id: str
    reason: str = ""
    event: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "outcome": str(self.outcome)}


class _Client(Protocol):
    """What a migration needs of the client (``KeelClient``): its deployment and the
    read model, and a way to send one command."""

    settings: Settings
    app: KeelApp
    codec: Codec
    clock: Clock
    projection: Any

    def send(self, workflow_id: str, payload: Any) -> str: ...


class Migrations:
    """Moving live runs to another version of their workflow (``KeelClient.migrations``;
    ``keel workflow migrate``; docs/versioning.md, "Migrate")."""

    def __init__(self, client: _Client) -> None:
        self.client = client

    def select(self, name: str, from_version: int, state: str | None = None) -> list[str]:
        """Ids of the live runs of ``name`` on ``from_version`` (and in ``state``), from
        the read model, sorted."""
        return _select(self.client, name, from_version, state)

    def plan(
        self, workflow_ids: list[str], to_version: int, actor: str, reason: str
    ) -> list[MigrationPlan]:
        """The dry run: each run's migration decided on its state rebuilt from
        ``keel.events``; nothing is written."""
        c = self.client
        return _plan(c.settings, c.app, workflow_ids, to_version, actor, reason)

    def send(
        self, workflow_ids: list[str], to_version: int, actor: str, reason: str, timeout_s: float
    ) -> list[MigrationOutcome]:
        """Send ``MigrateWorkflow`` to each run and wait for the orchestrator's answers."""
        return _send(self.client, workflow_ids, to_version, actor, reason, timeout_s)


def _select(client: _Client, name: str, from_version: int, state: str | None = None) -> list[str]:
    """Ids of the live runs of ``name`` on ``from_version`` (and in ``state``), from the
    read model, sorted."""
    out = []
    for row in client.projection.list():
        if row["name"] != name or row["version"] != from_version:
            continue
        if row["status"] in TERMINAL_STATUSES:
            continue
        if (
            state is not None
            and (client.projection.get(row["workflow_id"]) or {}).get("state") != state
        ):
            continue
        out.append(row["workflow_id"])
    return sorted(out)


def _plan(
    settings: Settings,
    app: KeelApp,
    workflow_ids: list[str],
    to_version: int,
    actor: str,
    reason: str,
) -> list[MigrationPlan]:
    """Decide the migration of each run on its state rebuilt from ``keel.events``;
    nothing is written."""
    envelopes = read_topic_history(settings, workflow_ids)
    decider = decider_of(app, recorded_token_hashes(envelopes))
    runs: dict[str, tuple[list[Envelope[Any]], dict[str, Envelope[Any]]]] = {}
    for events, commands in group_runs(envelopes):  # each run of a workflow, in order
        runs.setdefault(events[0].workflow_id, ([], commands))[0].extend(events)
    now = now_ms()
    plans = []
    for wid in workflow_ids:
        if wid not in runs:
            raise NotFoundError(f"no history in keel.events for workflow '{wid}'")
        events, commands = runs[wid]
        events.sort(key=lambda e: e.seq)
        state = decider.fold(events)
        assert state is not None
        target = decider.definitions.get((state.name, to_version))
        cmd = command_envelope(
            f"dry-run/{wid}",
            wid,
            MigrateWorkflow(
                to_version, actor, reason, state.version, target.digest if target else ""
            ),
            now,
        )
        p = MigrationPlan(
            workflow_id=wid,
            name=state.name,
            from_version=state.version,
            to_version=to_version,
            to_digest=target.digest if target is not None else "",
            status=str(state.status),
            from_state=state.current_state or "",
            outcome=Outcome.WOULD_MIGRATE,
        )
        try:
            _, envs = decider.handle(state, cmd, now)
        except CommandRejected as exc:
            p.outcome, p.reason = Outcome.REFUSED, str(exc)
        else:
            p.events = [d for d in map(payload_dict, envs) if d is not None]
            moved = next(e.payload for e in envs if isinstance(e.payload, WorkflowMigrated))
            p.to_state = moved.to_state
        if target is not None:
            current = [e for e in events if e.run_id == state.run_id]
            p.replay = replay_on_version(decider, current, commands, to_version)
        plans.append(p)
    return plans


def _send(
    client: _Client,
    workflow_ids: list[str],
    to_version: int,
    actor: str,
    reason: str,
    timeout_s: float,
) -> list[MigrationOutcome]:
    """Send ``MigrateWorkflow`` to each run and wait for the orchestrator's answers."""
    payloads = []
    for wid in workflow_ids:
        row = client.projection.get(wid)
        if row is None:
            raise NotFoundError(f"workflow '{wid}' does not exist; migration refused")
        target = client.app.get(row["name"], to_version)
        payloads.append(
            (wid, MigrateWorkflow(to_version, actor, reason, row["version"], target.digest))
        )
    watch = RefusalWatch(client.settings, client.codec)
    done: dict[str, MigrationOutcome] = {}

    def send_all() -> dict[str, tuple[str, int]]:
        sent = {}
        for wid, payload in payloads:
            before = len(client.projection.history(wid))
            sent[wid] = (client.send(wid, payload), before)
        return sent

    def answered(sent: dict[str, tuple[str, int]]) -> bool | None:
        for wid, (mid, before) in sent.items():
            if wid not in done and (found := _answer(client, watch, wid, mid, before, to_version)):
                done[wid] = found
        return True if len(done) == len(sent) else None

    try:
        pause = lambda left: watch.poll(min(left, 0.1))  # noqa: E731
        sent, _ = send_and_await(send_all, answered, pause, timeout_s, client.clock.monotonic)
    finally:
        watch.close()
    for wid, (mid, _) in sent.items():
        done.setdefault(
            wid,
            MigrationOutcome(
                wid,
                Outcome.PENDING,
                mid,
                f"sent; no answer within {timeout_s:g}s (`keel workflow show {wid}`)",
            ),
        )
    return [done[w] for w in sent]


def _answer(
    client: _Client,
    watch: RefusalWatch,
    wid: str,
    mid: str,
    before: int,
    to_version: int,
) -> MigrationOutcome | None:
    """Run ``wid``'s answer to command ``mid`` so far: ``WorkflowMigrated`` in its history
    past line ``before``, the orchestrator's refusal, or the run's end without one (a
    finished run records no refusal: it is refused, as the orchestrator refuses it,
    without waiting for the time to run out); None while there is none."""
    # the status before the history: a run seen ended has its whole history there
    status = (client.projection.get(wid) or {}).get("status")
    recorded = [
        h for h in client.projection.history(wid)[before:] if h["type"] == "WorkflowMigrated"
    ]
    if recorded:
        return MigrationOutcome(wid, Outcome.MIGRATED, mid, event=recorded[0])
    if mid in watch.letters:
        return MigrationOutcome(wid, Outcome.REFUSED, mid, watch.letters[mid])
    if status in TERMINAL_STATUSES:
        reason = f"workflow '{wid}' is {status}; migration to version {to_version} refused"
        return MigrationOutcome(wid, Outcome.REFUSED, mid, reason)
    return None
