"""The saga manager: workflow events in, commands out, exactly once (docs/sagas.md).

One consumer-group member (group ``<prefix>.sagas``) reads two topics and writes, per
batch, one Kafka transaction that also carries its input offsets (EOS v2: a
transactional producer and ``send_offsets_to_transaction`` with the consumer's group
metadata, so a zombie of a previous generation is fenced):

1. **route** — ``<prefix>.events`` (keyed by workflow id): a ``WorkflowStarted`` of a
   workflow some saga watches makes it a member of the saga instance its ``correlate``
   names; each event a saga reacts to is written to ``<prefix>.sagas`` as a
   ``SagaEvent`` keyed ``saga/correlation`` (so all facts of one instance, whatever
   workflows they come from, meet on one partition);
2. **react** — ``<prefix>.sagas``: the fact is folded into its instance and the saga's
   pure ``react`` gives the commands, written to ``<prefix>.commands`` with message ids
   derived from the fact.

State is rebuilt on every assignment from the log itself, like the orchestrator's: the
memberships from the assigned ``events`` partitions (starts only, and only of workflows
still running), each instance from its ``sagas`` partition, both up to the committed
offsets (read as *stable* offsets, so a previous owner's open transaction has ended).
Rebuilding never reacts, so nothing is emitted twice; a batch whose transaction aborts
is read again after a rebuild. Broker errors are sorted by
``orchestrator.io.kafka.broker_errors``: retriable ones retried, abortable ones abort and
rewind, fatal ones recreate the producer (fencing the old one) and rebuild.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from orchestrator.application.saga_declarations import (
    Saga,
    SagaFact,
    SagaView,
    command_id,
    sagas_of,
)
from orchestrator.config.settings import Settings
from orchestrator.domain.model.limits import loads_bounded
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    Envelope,
    SagaEvent,
    WorkflowStarted,
)
from orchestrator.io.kafka.clients import ClientMessage, read_partitions
from orchestrator.io.kafka.saga_feed import SagaFeed, SagaLog
from orchestrator.io.ports import ProducerReset, Stopping, TxnAbortable
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.records.envelopes import command_envelope, now_ms, runtime_envelope

__all__ = ["SagaManager", "sagas_topic"]

log = logging.getLogger("keel.sagas")

#: Batch size of one transaction.
BATCH = 500


def sagas_topic(settings: Settings) -> str:
    """The saga manager's own log (``<prefix>.sagas``): facts keyed ``saga/correlation``."""
    return settings.topic("sagas")


def require_sagas_topic(settings: Settings) -> None:
    """Refuse to start without ``<prefix>.sagas``.

    ``keel topics create`` makes it with the replication every other topic gets (a
    majority in sync from three replicas). Creating it here instead would give it this
    process's settings alone, and a saga log on one broker of three.
    """
    from orchestrator.io.kafka.topics import require_topic

    require_topic(settings, sagas_topic(settings))


def _data(payload: Any) -> dict[str, Any]:
    """An event's fields; ``*_json`` ones parsed (within the JSON limits) under their
    plain name."""
    out: dict[str, Any] = {}
    for f in fields(payload):
        value = getattr(payload, f.name)
        if f.name.endswith("_json") and isinstance(value, str):
            try:
                out[f.name[: -len("_json")]] = loads_bounded(value, f.name)
                continue
            except (ValueError, RecursionError):
                pass
        out[f.name] = value
    return out


class SagaManager:
    """Runs every saga declared on an application (``run`` until ``stop``)."""

    def __init__(
        self,
        settings: Settings,
        app: Any,
        *,
        instance_id: str | None = None,
        codec: Codec | None = None,
    ) -> None:
        self.settings = settings
        self.sagas: Mapping[str, Saga] = sagas_of(app)
        self.watch: dict[str, list[Saga]] = {}
        for saga in self.sagas.values():
            for wf in saga.reacts_to:
                self.watch.setdefault(wf, []).append(saga)
        self.instance_id = instance_id or settings.instance_id or uuid.uuid4().hex[:12]
        self.events = settings.topic("events")
        self.facts_topic = sagas_topic(settings)
        self.commands = settings.topic("commands")
        self.codec = codec or codec_for(settings)
        self._stop = threading.Event()
        self._dirty = True
        #: workflow id -> [(saga, correlation, workflow name)] of running member workflows
        self.members: dict[str, list[tuple[Saga, str, str]]] = {}
        self.instances: dict[tuple[str, str], SagaView] = {}
        self.routed = 0
        self.emitted = 0
        self.rebuilds = 0
        self.aborts = 0

    # -- lifecycle ---------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def health(self) -> dict[str, Any]:
        return {
            "sagas": sorted(self.sagas),
            "instances": len(self.instances),
            "routed": self.routed,
            "emitted": self.emitted,
            "rebuilds": self.rebuilds,
            "aborts": self.aborts,
        }

    def run(self) -> None:
        if not self.sagas:
            log.info("no saga is declared on this application; the saga manager idles")
            self._stop.wait()
            return
        require_sagas_topic(self.settings)
        feed = SagaFeed(self.settings, [self.events, self.facts_topic])
        txid = f"{self.settings.topic_prefix}.sagas.{self.instance_id}"
        out = SagaLog(self.settings, txid, None, stopping=self.stopping)
        log.info("saga manager %s runs %s", self.instance_id, ", ".join(sorted(self.sagas)))
        try:
            while not self.stopping():
                msgs = feed.poll(BATCH, 0.2)
                if self._dirty or feed.changed:
                    self._rebuild(feed, out)
                    msgs = []  # read again from the committed offsets
                if not msgs:
                    continue
                try:
                    self._transact(feed, out, msgs)
                except TxnAbortable as exc:
                    log.warning("saga batch aborted, read again: %s", exc)
                    self.aborts += 1
                    try:
                        out.abort()
                    except ProducerReset:
                        out.recreate()
                    self._dirty = True
                except ProducerReset as exc:
                    log.warning("saga producer reset: %s", exc)
                    self.aborts += 1
                    out.recreate()
                    self._dirty = True
        except Stopping:
            pass
        finally:
            feed.close()
            out.close()

    # -- rebuild -----------------------------------------------------------------------

    def _rebuild(self, feed: SagaFeed, out: SagaLog) -> None:
        """Memberships and instances from the log, up to the committed offsets; the
        consumer then goes on from those offsets."""
        self._dirty = False
        self.rebuilds += 1
        self.members.clear()
        self.instances.clear()
        ends = feed.rewind()
        if not ends:
            return
        # The producer before the facts are read: under this id it fences a killed
        # predecessor, whose open transaction is then aborted at once, not waited out. Not
        # before the feed owns partitions: with no broker yet that would hold the start
        # (docs/operations.md, "Orchestrator identity").
        out.open()
        for topic, learn in ((self.events, self._learn), (self.facts_topic, self._fold)):
            starts = {p: 0 for p, end in ends.get(topic, {}).items() if end > 0}
            for msg in read_partitions(self.settings, topic, starts, stop=self.stopping):
                if (msg.offset() or 0) < ends[topic][msg.partition() or 0]:
                    env = self._decode(msg)
                    if env is not None:
                        learn(env)
        log.info(
            "saga manager rebuilt %d running member workflows and %d saga instances",
            len(self.members),
            len(self.instances),
        )

    def _decode(self, msg: ClientMessage) -> Envelope[Any] | None:
        try:
            return self.codec.decode(msg.value() or b"")
        except Exception as exc:  # a record the codec cannot read is not a saga's concern
            log.warning("skipping %s/%s@%s: %s", msg.topic(), msg.partition(), msg.offset(), exc)
            return None

    def _learn(self, env: Envelope[Any]) -> list[tuple[Saga, str, str]]:
        """Memberships a workflow event starts or ends; the memberships it belongs to."""
        p = env.payload
        wid = env.workflow_id
        if isinstance(p, WorkflowStarted) and p.name in self.watch:
            try:
                data = json.loads(p.input_json)
            except ValueError:
                data = {}
            joined = self.members.setdefault(wid, [])
            for saga in self.watch[p.name]:
                corr = saga.correlate(wid, data)
                if corr is not None and not any(s is saga for s, _, _ in joined):
                    joined.append((saga, str(corr), p.name))
        found = self.members.get(wid, [])
        if isinstance(p, TERMINAL_EVENTS):
            self.members.pop(wid, None)  # a finished workflow writes no more events
        return found

    def _fold(self, env: Envelope[Any]) -> SagaFact | None:
        p = env.payload
        if not isinstance(p, SagaEvent):
            return None
        fact = SagaFact(
            p.workflow_name,
            p.source_workflow_id,
            p.event_type,
            p.event_seq,
            json.loads(p.data_json),
        )
        view = self.instances.setdefault((p.saga, p.correlation), SagaView(p.saga, p.correlation))
        view.add(fact)
        return fact

    # -- one batch, one transaction -----------------------------------------------------

    def _transact(self, feed: SagaFeed, out: SagaLog, msgs: list[ClientMessage]) -> None:
        out.begin()
        for msg in msgs:
            env = self._decode(msg)
            if env is None:
                continue
            if msg.topic() == self.events:
                self._route(out, env)
            else:
                self._react(out, env)
        out.commit_batch(msgs, feed)

    def _route(self, out: SagaLog, env: Envelope[Any]) -> None:
        for saga, corr, name in self._learn(env):
            if not saga.wants(name, env.type):
                continue
            fact = SagaEvent(
                saga=saga.name,
                correlation=corr,
                workflow_name=name,
                source_workflow_id=env.workflow_id,
                event_type=env.type,
                event_seq=env.seq,
                data_json=json.dumps(_data(env.payload), sort_keys=True, default=str),
            )
            key = f"{saga.name}/{corr}"
            record = runtime_envelope(
                f"sagafact/{saga.name}/{env.workflow_id}/{env.seq}",
                key,
                "",
                fact,
                now_ms(),
                causation_id=env.message_id,
                correlation_id=corr,
                traceparent=env.traceparent,
            )
            out.append(self.facts_topic, self.codec.encode(record), key.encode())
            self.routed += 1

    def _react(self, out: SagaLog, env: Envelope[Any]) -> None:
        p = env.payload
        saga = self.sagas.get(p.saga) if isinstance(p, SagaEvent) else None
        if saga is None:
            return
        view = self.instances.setdefault((p.saga, p.correlation), SagaView(p.saga, p.correlation))
        fact = SagaFact(
            p.workflow_name,
            p.source_workflow_id,
            p.event_type,
            p.event_seq,
            json.loads(p.data_json),
        )
        if fact.key in view.seen:
            return
        try:
            emits = saga.decide(view, fact)
        except Exception as exc:  # its code's bug: recorded in the log, never retried forever
            log.error("saga '%s' (%s) raised on %s: %r", saga.name, p.correlation, fact.key, exc)
            emits = []
        view.add(fact)
        for i, e in enumerate(emits):
            record = command_envelope(
                command_id(saga.name, p.correlation, fact, i),
                e.workflow_id,
                e.command,
                now_ms(),
                causation_id=env.message_id,
                correlation_id=p.correlation,
                traceparent=env.traceparent,
            )
            out.append(self.commands, self.codec.encode(record), e.workflow_id.encode())
            self.emitted += 1
