"""The orchestrator process: the single writer of every workflow on its partitions.

Per batch, in ONE Kafka transaction (EOS v2): read commands, ``decide``, append the
events to ``keel.events`` (same partition as the command), emit activity tasks, dead-
letter what cannot be processed, and commit the consumer offsets with the group
metadata. Only after the commit succeeds does the new state become this process's
memory; an aborted batch is rewound and retried, so memory never runs ahead of Kafka.

On assignment a partition is rebuilt from its newest checkpoint in ``keel.snapshots``
plus the tail of ``keel.events``; timers are re-armed from the rebuilt state. A
checkpoint writes the state of every workflow changed since the previous one and a
marker holding the events offset they cover, so recovery time stays bounded as
history grows.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from opentelemetry.trace import SpanKind, Status, StatusCode

from orchestrator.app import KeelApp
from orchestrator.codec import DecodeError, default_codec
from orchestrator.domain.decider import SUMMARY_EVENTS, CommandRejected, HistoryError
from orchestrator.domain.messages import (
    ActivityDeadLettered,
    ActivityScheduled,
    ActivityTask,
    DeadLetter,
    Envelope,
    FireTimer,
    WorkflowSnapshot,
)
from orchestrator.domain.state import WorkflowState
from orchestrator.runtime import tracing
from orchestrator.runtime.budget import RetryBudget
from orchestrator.runtime.kafka import (
    consumer_config,
    dead_letter,
    header,
    now_ms,
    poll_records,
    read_partitions,
    transactional_producer,
)
from orchestrator.runtime.timers import TimerHeap
from orchestrator.settings import Settings

log = logging.getLogger("keel.orchestrator")

#: Key of the per-partition checkpoint marker in keel.snapshots.
CHECKPOINT_KEY = "__keel_checkpoint__"
#: Kafka header naming each event's type, so a rebuild can pick what to decode.
TYPE_HEADER = "keel.type"
TERMINAL_TYPES = frozenset({"WorkflowCompleted", "WorkflowFailed", "WorkflowCancelled"})
#: The events ``Decider.summarize`` needs to rebuild a finished run.
SUMMARY_TYPES = frozenset(cls.__name__ for cls in SUMMARY_EVENTS)
TXN_TIMEOUT_S = 30.0


def _follow_up(ev: Envelope[Any], tag: str, now: int, payload: Any) -> Envelope[Any]:
    """A record caused by event ``ev`` (its task, its dead letter): same run, chained ids."""
    return Envelope(
        message_id=f"{ev.message_id}/{tag}",
        workflow_id=ev.workflow_id,
        run_id=ev.run_id,
        seq=0,
        type=type(payload).__name__,
        recorded_at=now,
        payload=payload,
        causation_id=ev.message_id,
        correlation_id=ev.correlation_id,
        traceparent=ev.traceparent,
    )


@dataclass
class PartitionState:
    """What this process holds for one owned partition."""

    workflows: dict[str, WorkflowState] = field(default_factory=dict)
    #: Workflows changed since the last checkpoint.
    dirty: set[str] = field(default_factory=set)
    #: keel.events offset just past the last event known to be in the log.
    events_end: int = 0
    events_since_checkpoint: int = 0


@dataclass
class OrchestratorStats:
    commands: int = 0
    events: int = 0
    tasks: int = 0
    dead_letters: int = 0
    transactions: int = 0
    aborts: int = 0
    recovered_events: int = 0
    recovery_s: float = 0.0


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
    ) -> None:
        self.settings = settings
        self.app = app
        self.decider = app.decider()
        self.codec = default_codec()
        self.batch_size = batch_size
        self.checkpoint_interval_s = checkpoint_interval_s
        self.checkpoint_events = checkpoint_events
        self.on_assigned = on_assigned
        self.instance_id = settings.instance_id or uuid.uuid4().hex[:12]
        self.t_commands = settings.topic("commands")
        self.t_events = settings.topic("events")
        self.t_tasks = settings.topic("tasks")
        self.t_snapshots = settings.topic("snapshots")
        self.t_dlq = settings.topic("dlq")
        self.partitions: dict[int, PartitionState] = {}
        self.timers = TimerHeap()
        self.retry_budget = RetryBudget(settings.retry_budget_per_s, settings.retry_budget_burst)
        self.stats = OrchestratorStats()
        self._stop = threading.Event()
        self._last_checkpoint = time.monotonic()
        self._tracer = tracing.tracer()
        self.consumer: Consumer | None = None
        self.producer: Any = None

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        self.producer = transactional_producer(
            self.settings, f"{self.settings.topic_prefix}.orchestrator.{self.instance_id}"
        )
        static = {"group.instance.id": self.instance_id} if self.settings.instance_id else {}
        self.consumer = Consumer(
            consumer_config(
                self.settings,
                f"{self.settings.topic_prefix}.orchestrator",
                **{"partition.assignment.strategy": "range", **static},
            )
        )
        self.consumer.subscribe(
            [self.t_commands],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        log.info("orchestrator %s started on %s", self.instance_id, self.t_commands)
        try:
            while not self._stop.is_set():
                self.step()
            if self.partitions:
                self.checkpoint()
        finally:
            self.consumer.close()
            self.producer.flush(10)
            log.info("orchestrator %s stopped", self.instance_id)

    def step(self) -> None:
        """One poll, and one transaction if there is work."""
        assert self.consumer is not None
        wait_ms = self.timers.next_due_in_ms(now_ms())
        timeout = 0.1 if wait_ms is None else min(0.1, wait_ms / 1000)
        msgs = poll_records(self.consumer, self.batch_size, timeout)
        now = now_ms()
        due = self.timers.pop_due(now) if self.partitions else []
        msgs = [m for m in msgs if m.partition() in self.partitions]
        if msgs or due:
            self._transact(msgs, due, now)
        if time.monotonic() - self._last_checkpoint >= self.checkpoint_interval_s or any(
            ps.events_since_checkpoint >= self.checkpoint_events for ps in self.partitions.values()
        ):
            self.checkpoint()

    # ------------------------------------------------------------------ one batch
    def _transact(self, msgs: list[Message], due: list[tuple[int, str, str]], now: int) -> None:
        overlay: dict[str, tuple[int, WorkflowState]] = {}
        first: dict[int, int] = {}
        nxt: dict[int, int] = {}
        self.producer.begin_transaction()
        try:
            for msg in msgs:
                p = msg.partition()
                first.setdefault(p, msg.offset())
                nxt[p] = msg.offset() + 1
                self._process_record(msg, overlay, now)
            for p, wf, timer_id in due:
                self._fire_timer(p, wf, timer_id, overlay, now)
            if nxt:
                offsets = [TopicPartition(self.t_commands, p, o) for p, o in nxt.items()]
                self.producer.send_offsets_to_transaction(
                    offsets, self.consumer.consumer_group_metadata(), TXN_TIMEOUT_S
                )
            self._commit()
        except KafkaException as exc:
            self._abort(exc, first, due)
            return
        self.producer.poll(0)  # serve delivery reports (they keep events_end exact)
        self.stats.transactions += 1
        self.stats.commands += len(msgs)
        for wf, (p, state) in overlay.items():
            ps = self.partitions.get(p)
            if ps is None:
                continue
            # A finished run keeps only its summary: memory stays flat as runs complete.
            ps.workflows[wf] = state.summary() if state.is_terminal else state
            ps.dirty.add(wf)
            for timer_id, fire_at in state.pending_timers():
                self.timers.arm(p, wf, timer_id, fire_at)

    def _commit(self) -> None:
        while True:
            try:
                self.producer.commit_transaction(TXN_TIMEOUT_S)
                return
            except KafkaException as exc:
                if exc.args[0].retriable():
                    continue
                raise

    def _abort(self, exc: KafkaException, first: dict[int, int], due: list) -> None:
        """Abort the batch and rewind; a fatal error (e.g. fenced) ends the process."""
        err: KafkaError = exc.args[0]
        if err.fatal() or not err.txn_requires_abort():
            log.error("fatal transaction error, stopping: %s", err)
            raise exc
        log.warning("transaction aborted, batch will be retried: %s", err)
        self.stats.aborts += 1
        self.producer.abort_transaction(TXN_TIMEOUT_S)
        for p, offset in first.items():
            if p in self.partitions:
                self.consumer.seek(TopicPartition(self.t_commands, p, offset))
        for p, wf, timer_id in due:
            state = self.partitions.get(p, PartitionState()).workflows.get(wf)
            if state is not None and timer_id in state.timers:
                self.timers.arm(p, wf, timer_id, state.timers[timer_id].fire_at)

    def _process_record(
        self, msg: Message, overlay: dict[str, tuple[int, WorkflowState]], now: int
    ) -> None:
        try:
            env = self.codec.decode(msg.value())
        except DecodeError as exc:
            self._dead_letter(msg, None, f"undecodable record: {exc}")
            return
        if env.payload.KIND != "command":
            self._dead_letter(msg, env, f"{env.type} is not a command")
            return
        self._apply(msg.partition(), env, overlay, now, msg)

    def _fire_timer(
        self,
        p: int,
        wf: str,
        timer_id: str,
        overlay: dict[str, tuple[int, WorkflowState]],
        now: int,
    ) -> None:
        ps = self.partitions.get(p)
        if ps is None:
            return
        state = overlay[wf][1] if wf in overlay else ps.workflows.get(wf)
        if state is None or timer_id not in state.timers:
            return  # fired already, or its wait ended
        purpose = state.timers[timer_id].purpose
        if purpose.startswith("retry:"):
            act = state.activities.get(purpose[len("retry:") :])
            if act is not None:
                wait_s = self.retry_budget.take(act.activity_type, now / 1000)
                if wait_s > 0:  # over budget: fire when a token is due
                    self.timers.arm(p, wf, timer_id, now + math.ceil(wait_s * 1000))
                    return
        env: Envelope[Any] = Envelope(
            message_id=f"{state.run_id}/timer/{timer_id}",
            workflow_id=wf,
            run_id=state.run_id,
            seq=0,
            type="FireTimer",
            recorded_at=now,
            payload=FireTimer(timer_id),
        )
        self._apply(p, env, overlay, now, None)

    def _apply(
        self,
        p: int,
        cmd: Envelope[Any],
        overlay: dict[str, tuple[int, WorkflowState]],
        now: int,
        msg: Message | None,
    ) -> None:
        if not tracing.enabled():
            # No exporter: no spans, but the caller's trace context still travels on.
            self._decide(p, cmd, overlay, now, msg, cmd.traceparent)
            return
        with self._tracer.start_as_current_span(
            f"keel.command {cmd.type}",
            context=tracing.extract(cmd.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={"keel.workflow_id": cmd.workflow_id, "keel.command": cmd.type},
        ) as span:
            rejected = self._decide(p, cmd, overlay, now, msg, tracing.current_traceparent())
            if rejected:
                span.set_status(Status(StatusCode.ERROR, rejected))

    def _decide(
        self,
        p: int,
        cmd: Envelope[Any],
        overlay: dict[str, tuple[int, WorkflowState]],
        now: int,
        msg: Message | None,
        traceparent: str | None,
    ) -> str | None:
        """Decide one command and stage its records; returns the rejection reason, if any."""
        wf = cmd.workflow_id
        ps = self.partitions[p]
        state = overlay[wf][1] if wf in overlay else ps.workflows.get(wf)
        try:
            new_state, events = self.decider.handle(state, cmd, now)
        except CommandRejected as exc:
            log.info("command rejected: %s", exc)
            if msg is not None:
                self._dead_letter(msg, cmd, f"rejected: {exc}")
            return str(exc)
        if not events or new_state is None:
            return None
        headers = [("traceparent", traceparent.encode())] if traceparent else []
        key = wf.encode()
        for ev in events:
            self.producer.produce(
                self.t_events,
                value=self.codec.encode(ev),
                key=key,
                partition=p,
                headers=[(TYPE_HEADER, ev.type.encode()), *headers],
                on_delivery=self._on_event_delivered,
            )
            if isinstance(ev.payload, ActivityScheduled):
                self._emit_task(ev, key, headers, now)
            elif isinstance(ev.payload, ActivityDeadLettered):
                self._dead_letter_activity(ev, key, now)
        self.stats.events += len(events)
        ps.events_since_checkpoint += len(events)
        overlay[wf] = (p, new_state)
        return None

    def _emit_task(self, ev: Envelope[Any], key: bytes, headers: list | None, now: int) -> None:
        s: ActivityScheduled = ev.payload
        task = _follow_up(
            ev,
            "task",
            now,
            ActivityTask(
                s.activity_id,
                s.activity_type,
                s.step,
                s.input_json,
                s.logical_attempt,
                s.attempt,
                s.idempotency_key,
                s.heartbeat_ms,
                s.report_start,
            ),
        )
        self.producer.produce(self.t_tasks, value=self.codec.encode(task), key=key, headers=headers)
        self.stats.tasks += 1

    def _dead_letter_activity(self, ev: Envelope[Any], key: bytes, now: int) -> None:
        """An activity past its bounds: a keel.dlq record an operator can list and redrive."""
        d: ActivityDeadLettered = ev.payload
        reason = (
            f"activity '{d.activity_id}' dead-lettered after {d.attempts} attempts: "
            f"{d.error_type}: {d.message}"
        )
        letter = _follow_up(
            ev,
            "dlq",
            now,
            DeadLetter(self.t_events, -1, -1, reason, key, self.codec.encode(ev)),
        )
        self.producer.produce(self.t_dlq, value=self.codec.encode(letter), key=key)
        self.stats.dead_letters += 1

    def _on_event_delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            ps = self.partitions.get(msg.partition())
            if ps is not None and msg.offset() >= ps.events_end:
                ps.events_end = msg.offset() + 1

    def _dead_letter(self, msg: Message, env: Envelope[Any] | None, reason: str) -> None:
        self.stats.dead_letters += 1
        log.warning(
            "dead letter from %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), reason
        )
        letter = dead_letter(msg, reason, env)
        self.producer.produce(self.t_dlq, value=self.codec.encode(letter), key=msg.key())

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> None:
        """Snapshot each workflow changed since the last checkpoint, plus a partition marker."""
        self._last_checkpoint = time.monotonic()
        touched = {p: ps for p, ps in self.partitions.items() if ps.dirty}
        if not touched:
            return
        now = now_ms()
        self.producer.flush(TXN_TIMEOUT_S)  # every delivery report in: events_end is exact
        self.producer.begin_transaction()
        try:
            for p, ps in touched.items():
                for wf in ps.dirty:
                    state = ps.workflows[wf]
                    self._produce_snapshot(p, wf, state.run_id, state.seq, state.to_json(), ps, now)
                self._produce_snapshot(p, CHECKPOINT_KEY, "", 0, "", ps, now)
            self._commit()
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal() or not err.txn_requires_abort():
                raise
            self.producer.abort_transaction(TXN_TIMEOUT_S)
            log.warning("checkpoint aborted, will retry: %s", err)
            return
        for ps in touched.values():
            ps.dirty.clear()
            ps.events_since_checkpoint = 0

    def _produce_snapshot(
        self, p: int, key: str, run_id: str, seq: int, state_json: str, ps: PartitionState, now: int
    ) -> None:
        env: Envelope[Any] = Envelope(
            message_id=f"snapshot/{key}/{seq}/{ps.events_end}",
            workflow_id=key,
            run_id=run_id,
            seq=seq,
            type="WorkflowSnapshot",
            recorded_at=now,
            payload=WorkflowSnapshot(state_json, ps.events_end),
        )
        self.producer.produce(
            self.t_snapshots, value=self.codec.encode(env), key=key.encode(), partition=p
        )

    # ------------------------------------------------------------------ rebalancing
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owned = sorted(tp.partition for tp in partitions)
        if not owned:
            return
        # With read_committed this offset fetch requires *stable* offsets (KIP-447): it
        # waits until a previous owner's open transaction has committed or aborted, so
        # the events read next include everything that owner committed.
        consumer.committed(partitions, timeout=120)
        began = time.monotonic()
        recovered = self.recover(owned)
        for p, ps in recovered.items():
            self.partitions[p] = ps
            for wf, state in ps.workflows.items():
                for timer_id, fire_at in state.pending_timers():
                    self.timers.arm(p, wf, timer_id, fire_at)
        took = time.monotonic() - began
        self.stats.recovery_s += took
        log.info(
            "assigned partitions %s: %d workflows rebuilt in %.2fs",
            owned,
            sum(len(ps.workflows) for ps in recovered.values()),
            took,
        )
        if self.on_assigned:
            self.on_assigned(owned)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        for p in gone:
            self.partitions.pop(p, None)
        self.timers.drop_partitions(gone)
        if gone:
            log.info("partitions %s revoked", sorted(gone))

    def recover(self, owned: list[int]) -> dict[int, PartitionState]:
        """Rebuild partitions from the newest checkpoint and the events after it."""
        result = {p: PartitionState() for p in owned}
        starts: dict[int, int] = dict.fromkeys(owned, 0)
        snapshots: dict[int, dict[str, str]] = {p: {} for p in owned}
        for msg in read_partitions(self.settings, self.t_snapshots, dict.fromkeys(owned, 0)):
            p = msg.partition()
            try:
                env = self.codec.decode(msg.value())
            except DecodeError as exc:
                log.error("unreadable snapshot at %s[%d]@%d: %s", msg.topic(), p, msg.offset(), exc)
                continue
            snap: WorkflowSnapshot = env.payload
            if env.workflow_id == CHECKPOINT_KEY:
                starts[p] = snap.events_offset
            else:
                snapshots[p][env.workflow_id] = snap.state_json
        for p in owned:
            result[p].workflows = {
                wf: WorkflowState.from_json(js) for wf, js in snapshots[p].items()
            }
            result[p].events_end = starts[p]
        tails: dict[int, dict[str, list[tuple[str | None, bytes]]]] = {p: {} for p in owned}
        count = 0
        for msg in read_partitions(self.settings, self.t_events, starts):
            p = msg.partition()
            result[p].events_end = msg.offset() + 1
            wf = (msg.key() or b"").decode("utf-8", "replace")
            tails[p].setdefault(wf, []).append((header(msg, TYPE_HEADER), msg.value()))
            count += 1
        for p, by_wf in tails.items():
            ps = result[p]
            for wf, records in by_wf.items():
                try:
                    ps.workflows[wf] = self._rebuild(ps.workflows.get(wf), records)
                    ps.dirty.add(wf)
                except (DecodeError, HistoryError) as exc:
                    log.error("cannot rebuild workflow %s on partition %d: %s", wf, p, exc)
        self.stats.recovered_events += count
        return result

    def _rebuild(
        self, base: WorkflowState | None, records: list[tuple[str | None, bytes]]
    ) -> WorkflowState:
        """One workflow from its snapshot (if any) and its events after the checkpoint.

        A run that ended is summarized from the few events that matter, without folding
        its whole history; a live run is folded event by event.
        """
        if base is not None and base.is_terminal:
            return base  # a finished run's snapshot: nothing can follow it
        decode = self.codec.decode
        types = [t for t, _ in records]
        starts_here = base is not None or types[0] == "WorkflowStarted"
        if types[-1] in TERMINAL_TYPES and None not in types and starts_here:
            needed = [decode(v) for t, v in records if t in SUMMARY_TYPES]
            return self.decider.summarize(base, needed)
        state = base
        for _, value in records:
            state = self.decider.evolve(state, decode(value))
        assert state is not None
        return state.summary() if state.is_terminal else state
