"""The orchestrator process: the single writer of every workflow on its partitions.

This module holds the lifecycle: the poll loop, partition assignment and revocation,
what happens when the broker misbehaves, health. The rest lives by concern:

* ``command_loop`` — one batch decided and committed in one transaction (poison
  isolation: one bad record is dead-lettered, the batch goes on);
* ``recovery`` — partitions rebuilt from checkpoints plus the log's tail, quarantine of
  runs that cannot be rebuilt, checkpoints;
* ``timers`` / ``budget`` — the timer index and the retry budget;
* ``ports`` with ``kafka_adapter`` (every process) and ``memory`` (unit tests only).

Broker errors never end the process: a retriable one is retried, an abortable one
aborts and rewinds the batch, a fatal one (fenced, or a call stalled past its bound)
recreates the producer — which fences the old epoch — and rebuilds the owned partitions
from the log. Only a reset loop (``max_resets`` within ``reset_window_s``) exits, for
the supervisor to restart the process. A stop request is honoured within about a second.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from handlers.attempt_runner import AttemptRunner
from handlers.execution import EffectBook
from orchestrator.application.app import KeelApp
from orchestrator.client.dead_letters import DeadLetters
from orchestrator.config.settings import Settings
from orchestrator.engine.budget import RetryBudget
from orchestrator.engine.command_loop import CommandLoop
from orchestrator.engine.local_activities import LOCAL_BOUND_MS, LocalActivities
from orchestrator.engine.owned import OrchestratorStats, PartitionState
from orchestrator.engine.parked_redrive import ParkedRedrive
from orchestrator.engine.recovery import (
    CHECKPOINT_KEY,
    SUMMARY_TYPES,
    TERMINAL_TYPES,
    TYPE_HEADER,
    Recovery,
)
from orchestrator.engine.runtime_context import RuntimeContext, Topics
from orchestrator.engine.timers import TimerHeap
from orchestrator.io.adapter_hooks import NO_HOOKS, AdapterHooks
from orchestrator.io.handoff.committed_channel import CommittedSink, channel
from orchestrator.io.ports import CommandIntake, EventLog, ProducerReset, Stopping, TxnAbortable
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.records.clock import SYSTEM_CLOCK, Clock
from orchestrator.records.envelopes import follow_up as _follow_up
from orchestrator.runtime.exit_codes import ExitCode
from orchestrator.runtime.health import StatusFile, status_path
from orchestrator.trust.human_task_tokens import decider_for
from orchestrator.trust.sealing import SealKeySource

__all__ = [
    "CHECKPOINT_KEY",
    "SUMMARY_TYPES",
    "TERMINAL_TYPES",
    "TXN_TIMEOUT_S",
    "TYPE_HEADER",
    "Orchestrator",
    "OrchestratorStats",
    "PartitionState",
    "_follow_up",
]

log = logging.getLogger("keel.orchestrator")

TXN_TIMEOUT_S = 30.0
#: How long a stopping orchestrator gives its final checkpoint. The checkpoint only
#: shortens the next owner's rebuild; against a broker that does not answer, its calls
#: would retry for ``TXN_TIMEOUT_S`` each while SIGTERM waits. Past this, the process
#: stops without it.
FINAL_CHECKPOINT_S = 5.0
#: How long each loop iteration folds runs a rebuild deferred (``tail_records``).
DEFERRED_FOLD_S = 0.005


class Orchestrator:
    def __init__(
        self,
        settings: Settings,
        app: KeelApp,
        *,
        batch_size: int = 500,
        checkpoint_interval_s: float = 30.0,
        checkpoint_events: int = 20_000,
        on_assigned: Callable[[list[int]], None] | None = None,
        adapters: tuple[CommandIntake, EventLog] | None = None,
        finished_capacity: int = 1000,
        status_interval_s: float | None = None,
        max_resets: int = 10,
        reset_window_s: float = 300.0,
        hard_exit_on_stall: bool = True,
        local_activities: bool = True,
        local_bound_ms: int = LOCAL_BOUND_MS,
        committed: CommittedSink | None = None,
        clock: Clock = SYSTEM_CLOCK,
        hooks: AdapterHooks = NO_HOOKS,
        codec: Codec | None = None,
        local_effects: EffectBook | None = None,
        attempts: AttemptRunner | None = None,
    ) -> None:
        """``hooks``: what the composition root wraps the decider in (none in production;
        ``keel evaluate``'s seeded bug, orchestrator/io/adapter_hooks.py). ``attempts``: the
        process's activity-attempt runner, which local steps run through (by default one
        with ``settings``' seal keys and ``clock``)."""
        self.settings = settings
        #: Timer due checks, decision times, checkpoints and retry intervals read it.
        self.clock = clock
        self.app = app
        self.decider = hooks.decider(decider_for(settings, app))
        self.codec = codec or codec_for(settings)
        self.batch_size = batch_size
        self.checkpoint_interval_s = checkpoint_interval_s
        self.checkpoint_events = checkpoint_events
        self.on_assigned = on_assigned
        if status_interval_s is None:  # ``keel bench`` asks for a finer cadence
            status_interval_s = settings.status_interval_s
        self.status_interval_s = status_interval_s
        self.max_resets = max_resets
        self.reset_window_s = reset_window_s
        self.hard_exit_on_stall = hard_exit_on_stall
        self.instance_id = settings.instance_id or uuid.uuid4().hex[:12]
        self.topics = Topics.for_prefix(settings.topic)
        self._stop = threading.Event()
        #: Set while the final checkpoint commits after a stop: the Kafka calls it makes
        #: must not give up because a stop was asked (a second stop ends the drain).
        self._draining = threading.Event()
        self._drain_until = 0.0
        self._resets: deque[float] = deque()
        self._pending_recovery: set[int] = set()
        self._retry_recovery_at = 0.0
        self._last_poll = clock.monotonic()
        self.state = "starting"
        #: Redrives parked commands this process can decide (orchestrator/engine/parked_redrive.py).
        self.parked = (
            None
            if adapters
            else ParkedRedrive(DeadLetters(settings, self.codec), self.decider.definitions)
        )
        if adapters is None:
            adapters = self._kafka_adapters()
            if committed is None:  # a projector thread of this process may listen
                committed = channel(self.topics.events)
        intake, event_log = adapters
        self.ctx = RuntimeContext(
            decider=self.decider,
            codec=self.codec,
            topics=self.topics,
            log=event_log,
            intake=intake,
            timers=TimerHeap(),
            budget=RetryBudget(settings.retry_budget_per_s, settings.retry_budget_burst),
            stopping=self._stopping,
            clock=clock,
            finished_capacity=finished_capacity,
        )
        if local_activities:
            self.ctx.local = LocalActivities(
                app,
                redis_url=settings.redis or None,
                topic_prefix=settings.topic_prefix,
                stop=self._stop,
                bound_ms=local_bound_ms,
                # the effect store of local side effects (None: Redis at settings.redis);
                # the in-process test kit gives its in-memory one (orchestrator/testing)
                effects=local_effects,
                attempts=attempts
                or AttemptRunner(app, seal_keys=SealKeySource(settings), clock=clock),
            )
        #: Committed events for an in-process projector (``committed.py``), if any.
        self.committed = committed
        self.loop = CommandLoop(self.ctx, committed)
        self.recovery = Recovery(self.ctx)

    def _kafka_adapters(self) -> tuple[CommandIntake, EventLog]:
        from orchestrator.io.kafka.adapter import KafkaCommandIntake, KafkaEventLog

        intake = KafkaCommandIntake(
            self.settings,
            self.topics.commands,
            f"{self.settings.topic_prefix}.orchestrator",
            instance_id=self.settings.instance_id,
            stopping=self._stopping,
        )
        event_log = KafkaEventLog(
            self.settings,
            f"{self.settings.topic_prefix}.orchestrator.{self.instance_id}",
            intake,
            stopping=self._stopping,
            txn_timeout_s=TXN_TIMEOUT_S,
        )
        return intake, event_log

    # ------------------------------------------------------------------ shared views
    @property
    def partitions(self) -> dict[int, PartitionState]:
        return self.ctx.partitions

    @property
    def stats(self) -> OrchestratorStats:
        return self.ctx.stats

    @property
    def timers(self) -> Any:
        return self.ctx.timers

    @property
    def retry_budget(self) -> RetryBudget:
        return self.ctx.budget

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        """Stop after the batch in hand and a final checkpoint; asked again while that
        checkpoint commits, stop without waiting for it."""
        if self._stop.is_set():
            self._draining.clear()
        self._stop.set()

    def _stopping(self) -> bool:
        """What the adapters' calls poll: a stop was asked and no final checkpoint drains
        (or it has had its ``FINAL_CHECKPOINT_S``)."""
        if not self._stop.is_set():
            return False
        return not self._draining.is_set() or self.clock.monotonic() > self._drain_until

    def run(self) -> None:
        status = StatusFile(
            status_path(self.settings.home, "orchestrator", self.instance_id),
            self.health,
            interval_s=self.status_interval_s,
        )
        self.subscribe()
        log.info("orchestrator %s started on %s", self.instance_id, self.topics.commands)
        clean = True
        if self.committed is not None:
            self.committed.open_publisher()
        try:
            self.state = "running"
            while not self._stop.is_set():
                try:
                    self.step()
                except ProducerReset as exc:
                    self._reset(exc)
                status.maybe_write()
            self.state = "stopping"
            if self.partitions and not self._abandoned_calls():
                # Before, the stop made this checkpoint's own commit raise Stopping: its
                # transaction stayed open until the broker aborted it, and the next owner
                # rebuilt from the older checkpoint (a longer tail, never a wrong state).
                self._drain_until = self.clock.monotonic() + FINAL_CHECKPOINT_S
                self._draining.set()
                try:
                    self.checkpoint()
                finally:
                    self._draining.clear()
        except Stopping:
            clean = False
        except (ProducerReset, TxnAbortable) as exc:
            log.warning("final checkpoint skipped: %s", exc)
        finally:
            if self.committed is not None:
                self.committed.close_publisher()
            self.state = "stopped"
            status.maybe_write(force=True)
            self._close(clean)
            log.info("orchestrator %s stopped", self.instance_id)
        if self.hard_exit_on_stall and self._abandoned_calls():
            # A Kafka call was abandoned mid-flight: its client may block interpreter
            # exit while destroying itself. The log is flushed; leave now.
            logging.shutdown()
            os._exit(ExitCode.OK if self._stop.is_set() else ExitCode.RESTART)

    def subscribe(self) -> None:
        """Join the intake: assignments rebuild partitions, revocations drop them."""
        self.ctx.intake.subscribe(self._on_assign, self._on_revoke)

    def _abandoned_calls(self) -> int:
        return int(getattr(self.ctx.log, "abandoned_calls", 0))

    def _close(self, clean: bool) -> None:
        """Close the clients, each bounded: leaving the group may wait on a lost coordinator."""
        closer = threading.Thread(target=self.ctx.intake.close, name="keel-close", daemon=True)
        closer.start()
        closer.join(10)
        if clean and not self._abandoned_calls():
            try:
                self.ctx.log.close()
            except Exception as exc:
                log.warning("closing the event log: %s", exc)
        if self.ctx.local is not None:
            self.ctx.local.close()

    def step(self) -> None:
        """One poll, and one transaction if there is work."""
        ctx = self.ctx
        if self._pending_recovery and self.clock.monotonic() >= self._retry_recovery_at:
            self._recover_pending()
        wait_ms = ctx.timers.next_due_in_ms(self.clock.now_ms())
        timeout = 0.1 if wait_ms is None else min(0.1, wait_ms / 1000)
        deferring = self._deferring
        if deferring:
            timeout = 0.0  # folds are waiting: poll, and fold between the batches
        records = ctx.intake.poll(self.batch_size, timeout)
        self._last_poll = self.clock.monotonic()
        now = self.clock.now_ms()
        due = ctx.timers.pop_due(now) if ctx.partitions else []
        records = [r for r in records if r.partition in ctx.partitions]
        if (records or due) and self.loop.transact(records, due, now):
            ctx.stats.last_commit_at = time.time()
        if deferring:
            self._fold_deferred()
        if self.recovery.due(self.checkpoint_interval_s, self.checkpoint_events):
            self.checkpoint()

    @property
    def _deferring(self) -> bool:
        return any(ps.deferred for ps in self.ctx.partitions.values())

    def _fold_deferred(self) -> None:
        """Fold some of the runs a rebuild deferred (``tail_records``), a few ms at a time
        between batches, so the checkpoint marker soon passes their events."""
        for ps in self.ctx.partitions.values():
            if ps.deferred:
                ps.fold_deferred(DEFERRED_FOLD_S)
                return

    def checkpoint(self) -> None:
        if self.recovery.checkpoint():
            self.ctx.stats.last_commit_at = time.time()

    def recover(self, owned: list[int]) -> dict[int, PartitionState]:
        """Rebuild partitions from the newest checkpoint and the events after it."""
        return self.recovery.recover(owned)

    # ------------------------------------------------------------------ broker trouble
    def _reset(self, exc: ProducerReset) -> None:
        """Recreate the producer (fencing the old epoch) and rebuild every owned partition."""
        ctx = self.ctx
        ctx.stats.producer_resets += 1
        ctx.stats.last_broker_error = str(exc)
        now = self.clock.monotonic()
        self._resets.append(now)
        while self._resets and now - self._resets[0] > self.reset_window_s:
            self._resets.popleft()
        if len(self._resets) > self.max_resets:
            log.critical(
                "%d producer resets within %.0fs; exiting for the supervisor to restart: %s",
                len(self._resets),
                self.reset_window_s,
                exc,
            )
            raise SystemExit(ExitCode.RESTART) from exc
        owned = sorted(set(ctx.partitions) | self._pending_recovery)
        log.warning("producer reset (%s): recreating it, rebuilding partitions %s", exc, owned)
        self.state = "resetting"
        ctx.partitions.clear()
        ctx.timers.drop_partitions(set(owned))
        backoff = 0.2
        while True:
            try:
                ctx.log.recreate()
                break
            except (ProducerReset, TxnAbortable) as again:
                log.warning("recreating the producer failed, retrying: %s", again)
                self._stop.wait(backoff)
                if self._stop.is_set():
                    raise Stopping("stopped while recreating the producer") from again
                backoff = min(5.0, backoff * 2)
        self._pending_recovery.update(owned)
        self._recover_pending()
        self.state = "running"

    def _recover_pending(self) -> None:
        """Read the partitions' commands again from the committed offsets, then rebuild.

        Either step can fail while the broker recovers (e.g. the committed offsets not
        answered in time): the partitions stay pending and both are tried again shortly.
        """
        owned = sorted(self._pending_recovery)
        try:
            self.ctx.intake.rewind_to_committed(owned)
            self._register(owned)
        except (Stopping, ProducerReset):
            raise
        except Exception as exc:  # the broker or the log unreadable for now
            log.error("rewinding and rebuilding partitions %s failed, will retry: %s", owned, exc)
            self._retry_recovery_at = self.clock.monotonic() + 2.0
            return
        self._pending_recovery.clear()

    # ------------------------------------------------------------------ rebalancing
    def _register(self, owned: list[int]) -> None:
        ctx = self.ctx
        began = self.clock.monotonic()
        # The producer before the rebuild reads. Restarted under its instance id, that
        # fences the killed predecessor, whose open transaction the coordinator then aborts
        # at once; made at the first commit instead, the read_committed read waited out that
        # transaction's timeout: 16-18 s after each SIGKILL mid-transaction. Not made before
        # joining the group: with no broker yet, that would hold the process's start
        # (docs/operations.md, "Orchestrator identity").
        ctx.log.open()
        recovered = self.recover(owned)
        for p, ps in recovered.items():
            ctx.partitions[p] = ps
            for wf, timer_id, fire_at in ps.timers():
                ctx.timers.arm(p, wf, timer_id, fire_at)
        took = self.clock.monotonic() - began
        ctx.stats.recovery_s += took
        self._rescale_budget()
        log.info(
            "assigned partitions %s: %d workflows rebuilt in %.2fs",
            owned,
            sum(ps.count() for ps in recovered.values()),
            took,
        )

    def _on_assign(self, owned: list[int]) -> None:
        if not owned:
            return
        self.state = "recovering"
        try:
            self._register(owned)
        except (Stopping, ProducerReset):
            raise
        except Exception as exc:  # keep the assignment; rebuild again from the loop
            log.error("rebuilding partitions %s failed, will retry: %s", owned, exc)
            self._pending_recovery.update(owned)
            self._retry_recovery_at = self.clock.monotonic() + 2.0
        self.state = "running"
        if self.parked is not None:
            self.parked.redrive_soon(owned)
        if self.on_assigned:
            self.on_assigned(owned)

    def _on_revoke(self, partitions: list[int]) -> None:
        gone = set(partitions)
        for p in gone:
            self.ctx.partitions.pop(p, None)
        self._pending_recovery -= gone
        self.ctx.timers.drop_partitions(gone)
        self._rescale_budget()
        if gone:
            log.info("partitions %s revoked", sorted(gone))

    def _rescale_budget(self) -> None:
        try:
            total = self.ctx.intake.partition_count()
        except Exception:  # metadata unavailable: keep the current share
            return
        self.ctx.budget.set_share(len(self.ctx.partitions), total)

    # ------------------------------------------------------------------ health
    def health(self) -> dict[str, Any]:
        """What the status file reports (see ``health``)."""
        ctx = self.ctx
        s = ctx.stats
        quarantined = [
            {"workflow_id": wf, "partition": p, "reason": reason}
            for p, ps in sorted(ctx.partitions.items())
            for wf, reason in sorted(ps.quarantined.items())
        ]
        intake_errors = int(getattr(ctx.intake, "coordinator_errors", 0))
        log_errors = int(getattr(ctx.log, "broker_errors", 0))
        return {
            "role": "orchestrator",
            "instance_id": self.instance_id,
            "pid": os.getpid(),
            "state": self.state,
            "updated_at": time.time(),
            "assigned_partitions": sorted(ctx.partitions),
            "partitions_pending_rebuild": sorted(self._pending_recovery),
            "last_commit_age_s": (
                round(time.time() - s.last_commit_at, 3) if s.last_commit_at else None
            ),
            "last_poll_age_s": round(self.clock.monotonic() - self._last_poll, 3),
            "live_workflows": sum(ps.live_count() for ps in ctx.partitions.values()),
            "finished_workflows": sum(
                len(ps.finished) + ps.deferred_finished for ps in ctx.partitions.values()
            ),
            # Runs a rebuild holds undecoded until they are folded (tail_records).
            "deferred_workflows": sum(len(ps.deferred) for ps in ctx.partitions.values()),
            "quarantined": quarantined[:100],
            "transactions": s.transactions,
            "aborts": s.aborts,
            "dead_letters": s.dead_letters,
            "refused_commands": s.refused,
            "producer_resets": s.producer_resets,
            "stalled_calls": self._abandoned_calls(),
            "broker_errors": log_errors + s.aborts,
            "consumer_errors": intake_errors,
            "consumer_resets": int(getattr(ctx.intake, "consumer_resets", 0)),
            "last_broker_error": s.last_broker_error or str(getattr(ctx.intake, "last_error", "")),
            "retry_budget_per_s": ctx.budget.rate,
            "commands": s.commands,
            "events": s.events,
            "recovery_s": round(s.recovery_s, 3),
            "recovered_events": s.recovered_events,
            "timings": {
                "commit_ms_total": round(s.commit_ms_total, 3),
                "decide_ms_total": round(s.decide_ms_total, 3),
                "intake_lag_ms_total": round(s.intake_lag_ms_total, 3),
                "intake_lag_n": s.intake_lag_n,
                "local_activities": s.local_activities,
                "local_overruns": s.local_overruns,
                "local_ms_total": round(ctx.local.run_ms, 3) if ctx.local is not None else 0.0,
            },
        }
