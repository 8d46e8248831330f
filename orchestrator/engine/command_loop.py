"""One batch of commands and due timers, decided and committed in ONE transaction.

Per batch (EOS v2): read commands, ``decide``, append the events to ``keel.events``
(same partition as the command), emit activity tasks, dead-letter what cannot be
processed, and commit the intake offsets with the transaction. Only after the commit
succeeds does the new state become this process's memory; an aborted batch is rewound
and retried, so memory never runs ahead of the log.

Poison isolation: each record is admitted, decided and encoded on its own. Whatever
goes wrong with one record (undecodable, null, misrouted, an invalid id, an event too
large to write, or any exception the decider raises) becomes a dead letter with the
reason, and the batch goes on. A command the decider refuses is no poison: a live run
records the refusal in its history (``CommandRefused``) and nothing goes to the dlq; only
a refused start, which no run holds, is kept there (docs/activities.md, "Dead letters"),
and a refused child start fails the parent's step instead. A command only the engine
issues (``run_scope.ENGINE_ONLY_COMMANDS``: a timer's fire) read from the commands topic
is refused the same way, never decided.
Nothing a record causes is appended before all of it is encoded and checked, so a
failing record leaves no partial output (the records besides events, tasks, commands and
dead letters, are built by :mod:`orchestrator.engine.batch_records`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanKind

from orchestrator.domain import CommandRejected
from orchestrator.domain.lifecycle.missing_versions import PARKED, RunParked
from orchestrator.domain.lifecycle.run_scope import engine_only_reason
from orchestrator.domain.model.errors import KeelError
from orchestrator.domain.model.ids import check_workflow_id
from orchestrator.domain.model.messages import (
    ActivityDeadLettered,
    ActivityScheduled,
    DecideHumanTask,
    Envelope,
    FireTimer,
    StartWorkflow,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.engine.batch_records import (
    Out,
    activity_letter,
    command_record,
    intake_letter,
    runtime_letter,
    task_record,
)
from orchestrator.engine.child_runs import (
    abandoned_children,
    child_refused,
    child_start,
    is_child,
    parent_report,
)
from orchestrator.engine.command_checks import Refusals, over_limits, reason_of
from orchestrator.engine.local_activities import LocalRun
from orchestrator.engine.owned import PartitionState
from orchestrator.engine.recovery import TYPE_HEADER
from orchestrator.engine.runtime_context import RuntimeContext
from orchestrator.engine.tail_records import armed_header
from orchestrator.io.handoff.committed_channel import CommittedEvent, CommittedSink
from orchestrator.io.handoff.committed_pipe import PipePublisher
from orchestrator.io.partitioning import partition_for
from orchestrator.io.ports import DeliveryCallback, Record, TxnAbortable
from orchestrator.payload_schemas.codec import DecodeError
from orchestrator.records.envelopes import (
    check_record_size,
    runtime_envelope,
    stamped,
)
from orchestrator.telemetry import tracing
from orchestrator.trust.decision_proofs import DecisionProofs, proofs_for

__all__ = ["CommandLoop", "Out"]

log = logging.getLogger("keel.orchestrator")

Overlay = dict[str, tuple[int, WorkflowState]]


#: Rounds of local activities one batch runs (a chain of local steps is one round per
#: step); past it, the rest go to the workers, so a looping workflow cannot hold a batch.
MAX_LOCAL_ROUNDS = 32


#: Home partitions of recent keys: ``murmur2`` in Python costs more than the lookup, and
#: a workflow's key comes back with every report. Cleared when full (it is only a cache).
_HOME_CACHE_MAX = 65536


class _Sent:
    """An event appended in the open transaction; its offset once Kafka reports it."""

    __slots__ = ("envelope", "follows", "loop", "offset", "partition", "value")

    def __init__(
        self, loop: CommandLoop, partition: int, envelope: Envelope[Any], value: bytes
    ) -> None:
        self.loop = loop
        self.partition = partition
        self.envelope = envelope
        self.value = value
        self.offset = -1
        #: The record it follows on its partition (``CommittedEvent.follows``).
        self.follows = -1

    def __call__(self, partition: int, offset: int) -> None:
        self.offset = offset
        self.loop._on_event_delivered(partition, offset)


class CommandLoop:
    def __init__(self, ctx: RuntimeContext, committed: CommittedSink | None = None) -> None:
        self.ctx = ctx
        #: Local activities scheduled by this batch's decisions, not run yet.
        self._local: list[LocalRun] = []
        #: Where committed events go for an in-process projector (``committed.py``).
        self.committed = committed
        #: This batch's events, when a projector listens; published once committed.
        self._sent: list[_Sent] | None = None
        self._homes: dict[tuple[bytes, int], int] = {}
        #: Per partition, the offset of the open transaction's last event delivered.
        self._txn_ends: dict[int, int] = {}
        #: Checks the proof of every human-task decision (None: no key, all refused).
        self._proofs: DecisionProofs | None = proofs_for(ctx.decider)
        self._refusals = Refusals(ctx)

    # ------------------------------------------------------------------ one batch
    def transact(self, records: list[Record], due: list[tuple[int, str, str]], now: int) -> bool:
        """Decide and commit one batch; False when it was aborted and rewound.

        ``ProducerReset`` and ``Stopping`` propagate: the caller resets or stops.
        """
        ctx = self.ctx
        overlay: Overlay = {}
        first: dict[int, int] = {}
        nxt: dict[int, int] = {}
        self._local = []
        feed = self.committed
        self._sent = [] if feed is not None and feed.listening else None
        self._txn_ends = {}
        began = time.perf_counter()
        ctx.log.begin()
        try:
            for rec in records:
                first.setdefault(rec.partition, rec.offset)
                nxt[rec.partition] = rec.offset + 1
                if rec.timestamp > 0:
                    ctx.stats.intake_lag_ms_total += max(0, now - rec.timestamp)
                    ctx.stats.intake_lag_n += 1
                self._emit(self._process_record(rec, overlay, now))
            for p, wf, timer_id in due:
                self._emit(self._fire_timer(p, wf, timer_id, overlay, now))
            local_ms = self._run_local(overlay, now)
            committing = time.perf_counter()
            ctx.log.commit(nxt)
        except TxnAbortable as exc:
            self._local = []
            self._sent = None
            self._abort(exc, first, due)
            return False
        done = time.perf_counter()
        sent, self._sent = self._sent, None
        if sent and feed is not None:  # after the commit: only facts reach the projector
            _chain(sent, ctx.partitions)
            if isinstance(feed, PipePublisher):  # another process: the records alone
                feed.publish(sent)
            else:
                feed.publish(_committed(sent, overlay))
        for p, offset in self._txn_ends.items():  # published or not, every commit counts
            ps = ctx.partitions.get(p)
            if ps is not None:
                ps.last_committed_event = offset
        ctx.stats.commit_ms_total += (done - committing) * 1000
        ctx.stats.decide_ms_total += (committing - began) * 1000 - local_ms
        ctx.stats.transactions += 1
        ctx.stats.commands += len(records)
        for wf, (p, state) in overlay.items():
            ps = ctx.partitions.get(p)
            if ps is None:
                continue
            ps.put(wf, state)
            for timer_id, fire_at in state.pending_timers():
                ctx.timers.arm(p, wf, timer_id, fire_at)
        return True

    def _run_local(self, overlay: Overlay, now: int) -> float:
        """Run the batch's local activities and decide their reports in this transaction.

        A report may schedule the next local step: one round per step of a chain, up to
        ``MAX_LOCAL_ROUNDS``; what is left then is sent to the workers. Returns the ms spent
        running handlers.
        """
        ctx = self.ctx
        spent = 0.0
        rounds = 0
        while self._local and ctx.local is not None:
            runs, self._local = self._local, []
            if rounds >= MAX_LOCAL_ROUNDS:
                for r in runs:
                    self._emit([self._remote_task(r, now)])
                continue
            rounds += 1
            began = time.perf_counter()
            reports = ctx.local.run(runs)
            spent += (time.perf_counter() - began) * 1000
            ctx.stats.local_activities += len(runs)
            decided_at = max(now, ctx.clock.now_ms())
            for r, report in zip(runs, reports, strict=True):
                if report is None:  # overran: its start-to-close timer fails it
                    ctx.stats.local_overruns += 1
                    continue
                self._emit(self._local_report(r, report, overlay, decided_at))
        return spent

    def _local_report(self, r: LocalRun, report: Any, overlay: Overlay, now: int) -> list[Out]:
        """Decide a local activity's report exactly as a worker's report would be."""
        env = runtime_envelope(
            r.report_message_id,
            r.workflow_id,
            r.run_id,
            report,
            now,
            causation_id=r.task_message_id,
            correlation_id=r.correlation_id,
        )
        try:
            return self._apply(r.partition, env, overlay, now, None)
        except Exception as exc:  # a report that breaks the decider: letter it, go on
            reason = reason_of(exc)
            log.error("local report of %s failed: %s", r.workflow_id, reason, exc_info=True)
            why = f"local activity report failed: {reason}"
            return [runtime_letter(self.ctx, env, r.partition, why, now)]

    def _remote_task(self, r: LocalRun, now: int) -> Out:
        """A local step past the batch's rounds: its task goes to the workers after all."""
        ev = runtime_envelope(
            r.event_message_id,
            r.workflow_id,
            r.run_id,
            r.scheduled,
            now,
            correlation_id=r.correlation_id,
        )
        return task_record(self.ctx, ev, r.workflow_id.encode(), (), now)

    def _emit(self, outs: list[Out]) -> None:
        for o in outs:
            self.ctx.log.append(
                o.topic,
                o.value,
                o.key,
                partition=o.partition,
                headers=o.headers,
                on_delivered=o.on_delivered,
            )

    def _abort(
        self, exc: TxnAbortable, first: dict[int, int], due: list[tuple[int, str, str]]
    ) -> None:
        """Abort the batch and rewind its input; memory was never touched."""
        ctx = self.ctx
        log.warning("transaction aborted, batch will be retried: %s", exc)
        ctx.stats.aborts += 1
        ctx.stats.last_broker_error = str(exc)
        ctx.log.abort()
        for p, offset in first.items():
            if p in ctx.partitions:
                ctx.intake.rewind(p, offset)
        for p, wf, timer_id in due:
            ps = ctx.partitions.get(p)
            state = ps.get(wf) if ps is not None else None
            if state is not None and timer_id in state.timers:
                ctx.timers.arm(p, wf, timer_id, state.timers[timer_id].fire_at)

    # ------------------------------------------------------------------ one record
    def _process_record(self, rec: Record, overlay: Overlay, now: int) -> list[Out]:
        env: Envelope[Any] | None = None
        try:
            env, reason = self._admit(rec)
            if reason is None:
                assert env is not None
                return self._apply(rec.partition, env, overlay, now, rec)
        except Exception as exc:  # poison isolation: one record never stops the batch
            log.warning(
                "command at %s[%d]@%d failed: %s",
                rec.topic,
                rec.partition,
                rec.offset,
                reason_of(exc),
                exc_info=not isinstance(exc, KeelError),
            )
            reason = reason_of(exc)
        return intake_letter(self.ctx, rec, env, reason)

    def _admit(self, rec: Record) -> tuple[Envelope[Any] | None, str | None]:
        """The decoded command, or the reason it must be dead-lettered."""
        if rec.value is None:
            return None, "record has no value (null)"
        try:
            env = self.ctx.codec.decode(rec.value)
        except DecodeError as exc:
            return None, f"undecodable record: {exc}"
        if getattr(env.payload, "KIND", None) != "command":
            return env, f"{env.type} is not a command"
        wf = check_workflow_id(env.workflow_id)
        key = wf.encode()
        if rec.key is None:
            return env, "record has no key; a command's key must be its workflow id"
        if rec.key != key:
            shown = rec.key[:80].decode("utf-8", "replace")
            return env, f"record key '{shown}' differs from the envelope's workflow id '{wf}'"
        count = self.ctx.intake.partition_count()
        home = self._homes.get((key, count))
        if home is None:
            if len(self._homes) >= _HOME_CACHE_MAX:
                self._homes.clear()
            home = self._homes[key, count] = partition_for(key, count)
        if home != rec.partition:
            return env, (
                f"record arrived on partition {rec.partition}, but workflow '{wf}' "
                f"belongs on partition {home}"
            )
        ps = self.ctx.partitions.get(rec.partition)
        if ps is not None and wf in ps.quarantined:
            return env, f"workflow '{wf}' is quarantined: {ps.quarantined[wf]}"
        return env, over_limits(env.payload)

    def _fire_timer(self, p: int, wf: str, timer_id: str, overlay: Overlay, now: int) -> list[Out]:
        ctx = self.ctx
        ps = ctx.partitions.get(p)
        if ps is None:
            return []
        state = overlay[wf][1] if wf in overlay else ps.get(wf)
        if state is None or timer_id not in state.timers:
            return []  # fired already, or its wait ended
        if now < state.timers[timer_id].fire_at:  # an entry of an earlier arming: not due
            ctx.timers.arm(p, wf, timer_id, state.timers[timer_id].fire_at)
            return []
        purpose = str(state.timers[timer_id].purpose)
        if purpose.startswith("retry:"):
            act = state.activities.get(purpose[len("retry:") :])
            if act is not None:
                wait_s = ctx.budget.take(act.activity_type, now / 1000)
                if wait_s > 0:  # over budget: fire when a token is due
                    ctx.timers.arm(p, wf, timer_id, now + math.ceil(wait_s * 1000))
                    return []
        env = runtime_envelope(
            f"{state.run_id}/timer/{timer_id}", wf, state.run_id, FireTimer(timer_id), now
        )
        try:
            return self._apply(p, env, overlay, now, None)
        except Exception as exc:  # a timer of a broken run: letter it, keep going
            reason = reason_of(exc)
            log.error("timer %s of workflow %s failed: %s", timer_id, wf, reason, exc_info=True)
            return [runtime_letter(ctx, env, p, f"timer '{timer_id}' failed: {reason}", now)]

    def _apply(
        self, p: int, cmd: Envelope[Any], overlay: Overlay, now: int, rec: Record | None
    ) -> list[Out]:
        if not tracing.enabled():  # no exporter: no span, the context passes on as is
            return self._decide(p, cmd, overlay, now, rec, cmd.traceparent)[0]
        attributes = {"keel.workflow_id": cmd.workflow_id, "keel.command": cmd.type}
        with tracing.span(
            f"keel.command {cmd.type}", cmd.traceparent, SpanKind.CONSUMER, attributes
        ) as span:
            traceparent = tracing.traceparent_in(span, cmd.traceparent)
            outs, rejected = self._decide(p, cmd, overlay, now, rec, traceparent)
            tracing.mark_error(span, rejected)
        return outs

    def _decide(
        self,
        p: int,
        cmd: Envelope[Any],
        overlay: Overlay,
        now: int,
        rec: Record | None,
        traceparent: str | None,
    ) -> tuple[list[Out], str | None]:
        """Decide one command into encoded, size-checked records; and the rejection, if any."""
        ctx = self.ctx
        wf = cmd.workflow_id
        ps = ctx.partitions[p]
        state = overlay[wf][1] if wf in overlay else ps.get(wf)
        # The decision's clock is when this orchestrator takes the command, not when a
        # client wrote it: a command that waited in Kafka (an orchestrator down, a lag)
        # must not find its timeouts already expired, nor a skewed client move them.
        taken = cmd if cmd.recorded_at == now else stamped(cmd, now)
        kept: list[Out] = []
        try:
            if rec is not None and (forged := engine_only_reason(cmd.payload)) is not None:
                raise CommandRejected(forged)  # e.g. a FireTimer: only the engine fires timers
            if type(cmd.payload) is DecideHumanTask:
                self._check_proof(wf, cmd.payload)
            new_state, events = ctx.decider.handle(state, taken, now)
        except RunParked as exc:  # keep the command; record once why the run waits
            log.warning("command parked: %s", exc)
            kept = intake_letter(ctx, rec, cmd, f"{PARKED}{exc}") if rec is not None else []
            if not exc.events:
                return kept, str(exc)
            new_state, events = exc.state, exc.events
        except CommandRejected as exc:
            if type(cmd.payload) is StartWorkflow and cmd.payload.parent_workflow_id:
                log.info("child start refused: %s", exc)  # the parent's step fails with it
                refusal = child_refused(cmd, str(exc), state is not None, now)
                return [command_record(ctx, refusal)], str(exc)
            if type(cmd.payload) is StartWorkflow:  # no run holds it: kept for an operator
                log.info("start refused: %s", exc)
                letters = (
                    intake_letter(ctx, rec, cmd, f"rejected: {exc}") if rec is not None else []
                )
                return letters, str(exc)
            new_state, events = self._refusals.record(state, taken, now, str(exc))
            if not events:
                return [], str(exc)
        if not events or new_state is None:
            return [], None
        headers: tuple[tuple[str, bytes], ...] = (
            (("traceparent", traceparent.encode()),) if traceparent else ()
        )
        key = wf.encode()
        definition_for = ctx.decider.definition_for
        outs: list[Out] = []
        local: list[LocalRun] = []
        sent: list[_Sent] | None = [] if self._sent is not None else None
        # The decision's last event says what a rebuild needs of the run (tail_records).
        last = len(events) - 1
        for i, ev in enumerate(events):
            typed = ctx.codec.hint(new_state, ev.payload)  # an activity's result, a run's output
            value = check_record_size(
                ctx.codec.encode(ev, typed), f"event {ev.type} of workflow '{wf}'"
            )
            kind = (TYPE_HEADER, ev.type.encode())
            on_delivered: DeliveryCallback = self._on_event_delivered
            if sent is not None:
                one = _Sent(self, p, ev, value)
                sent.append(one)
                on_delivered = one
            outs.append(
                Out(
                    ctx.topics.events,
                    value,
                    key,
                    p,
                    (kind, *headers) if i != last else (kind, armed_header(new_state), *headers),
                    on_delivered,
                )
            )
            if isinstance(ev.payload, ActivityScheduled) and is_child(ev.payload.activity_type):
                outs.append(command_record(ctx, child_start(definition_for, new_state, ev, now)))
            elif isinstance(ev.payload, ActivityScheduled):
                run = self._plan_local(p, new_state, ev)
                if run is not None:
                    local.append(run)
                else:
                    outs.append(task_record(ctx, ev, key, headers, now))
            elif isinstance(ev.payload, ActivityDeadLettered):
                outs.append(activity_letter(ctx, ev, key, now))
            elif (report := parent_report(new_state, ev, now)) is not None:
                outs.append(command_record(ctx, report))
        stopped = abandoned_children(definition_for, state, new_state, events[-1], now)
        outs.extend(command_record(ctx, cancel) for cancel in stopped)
        if sent and self._sent is not None:  # all encoded and checked: they will be sent
            self._sent.extend(sent)
        ctx.stats.events += len(events)
        ps.events_since_checkpoint += len(events)
        overlay[wf] = (p, new_state)
        self._local.extend(local)
        return outs + kept, None

    def _check_proof(self, wf: str, p: DecideHumanTask) -> None:
        """A decision's actor and roles count only when a Keel process signed them
        (orchestrator/trust/decision_proofs.py); ``CommandRejected`` otherwise."""
        if self._proofs is None:
            raise CommandRejected(
                "this orchestrator holds no task-token key to verify decisions; decision of "
                f"human task '{p.task_id[:200]}' refused"
            )
        self._proofs.check(wf, p)

    def _plan_local(self, p: int, state: WorkflowState, ev: Envelope[Any]) -> LocalRun | None:
        local = self.ctx.local
        if local is None:
            return None
        return local.plan(  # type: ignore[no-any-return]
            self.ctx.decider.definition_for,
            state,
            p,
            ev.message_id,
            ev.correlation_id,
            ev.payload,
        )

    def _on_event_delivered(self, p: int, offset: int) -> None:
        if offset > self._txn_ends.get(p, -1):
            self._txn_ends[p] = offset
        ps = self.ctx.partitions.get(p)
        if ps is not None and offset >= ps.events_end:
            ps.events_end = offset + 1


def _chain(sent: list[_Sent], partitions: Mapping[int, PartitionState]) -> None:
    """Set the record each event follows on its partition: the previous one of this
    transaction there, else the last event this process committed there since it took
    the partition (kept on its :class:`PartitionState`, which a new owner starts afresh;
    called before this transaction's ends are recorded there)."""
    before: dict[int, int] = {}
    for s in sent:
        p = s.partition
        follows = before.get(p)
        if follows is None:
            ps = partitions.get(p)
            follows = ps.last_committed_event if ps is not None else -1
        s.follows = follows
        before[p] = s.offset


def _committed(sent: list[_Sent], overlay: Overlay) -> list[CommittedEvent]:
    """The transaction's events for an in-process projector, each run's last one with
    the run's state after it (``CommittedEvent.state``); not a stand-in's, which is no
    fold."""
    last: dict[str, int] = {s.envelope.workflow_id: i for i, s in enumerate(sent)}
    out = []
    for i, s in enumerate(sent):
        state = None
        wf = s.envelope.workflow_id
        if last[wf] == i and wf in overlay:
            final = overlay[wf][1]
            if final.seq == s.envelope.seq and final.unfolded_from is None:
                state = final
        out.append(CommittedEvent(s.partition, s.offset, s.envelope, state, s.value, s.follows))
    return out
