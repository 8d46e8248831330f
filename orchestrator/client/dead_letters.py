"""The dead-letter queue seen by an operator: list what is there, send it out again, once.

Three kinds of letters live in ``keel.dlq``:

* an **activity** past its retry bounds (from an ``ActivityDeadLettered`` event): its
  workflow waits in ``needs_attention``; redrive sends ``RedriveActivity``, a new
  attempt of the same logical attempt under the same idempotency key;
* a **record** that could not be processed (undecodable, or a rejected command): redrive
  produces the original bytes to their source topic again, e.g. after a fix is deployed;
* an **unreadable** record in the dlq itself (not a dead letter Keel can decode): listed
  with the reason, never redriven.

A redrive happens at most once per letter (docs/activities.md): the operator first takes
a Redis claim (``SET NX`` at ``Keyspace.redriven``) so two concurrent redrives cannot
both go out, then one Kafka transaction produces the redriven record *and* a marker
record in the dlq (keyed by the letter id, header ``keel-redriven``), so the marker
exists exactly when the redrive was sent. A letter with a marker (or a claim) is
``redriven``: hidden from ``keel dlq list`` unless ``--all``, and refused by a second
``keel dlq redrive``.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import socket
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis
from confluent_kafka import KafkaException, Message

from orchestrator.codec import default_codec
from orchestrator.domain.model.errors import CommandRejected, NotFoundError, UnavailableError
from orchestrator.domain.model.messages import (
    ActivityDeadLettered,
    DeadLetter,
    Envelope,
    RedriveActivity,
)
from orchestrator.io.kafka.clients import header, read_partitions, transactional_producer
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.runtime.envelopes import command_envelope, now_ms, runtime_envelope
from orchestrator.settings import Settings

__all__ = [
    "MARKER_HEADER",
    "Letter",
    "LetterKind",
    "LetterState",
    "list_letters",
    "redrive",
    "redrive_letters",
]

log = logging.getLogger("keel.dlq")

#: Header of a redrive marker record in the dlq; its value is the letter id.
MARKER_HEADER = "keel-redriven"


class LetterKind(StrEnum):
    ACTIVITY = "activity"
    RECORD = "record"
    UNREADABLE = "unreadable"


class LetterState(StrEnum):
    OPEN = "open"
    REDRIVEN = "redriven"


@dataclass
class Letter:
    id: str
    kind: str  # a LetterKind
    workflow_id: str
    recorded_at: int
    reason: str
    source_topic: str
    source_partition: int
    source_offset: int
    activity_id: str | None
    attempts: int | None
    value: bytes | None
    key: bytes | None = None
    state: str = LetterState.OPEN
    redriven_at: int | None = None
    where: str = field(default="", repr=False)  # the letter's own place in the dlq

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "workflow_id": self.workflow_id,
            "activity_id": self.activity_id,
            "attempts": self.attempts,
            "reason": self.reason,
            "recorded_at": self.recorded_at,
            "redriven_at": self.redriven_at,
            "source": f"{self.source_topic}[{self.source_partition}]@{self.source_offset}",
        }


def list_letters(settings: Settings, *, include_redriven: bool = True) -> list[Letter]:
    """Every letter in the dlq, oldest first per partition, with its state."""
    topic = settings.topic("dlq")
    records = _read_dlq(settings, topic)
    letters: dict[str, Letter] = {}
    markers: dict[str, int] = {}
    for msg in records:
        marked = header(msg, MARKER_HEADER)
        if marked is not None:
            markers.setdefault(marked, msg.timestamp()[1])
            continue
        letter = _letter(msg)
        letters.setdefault(letter.id, letter)  # a letter produced twice is one letter
    claimed = _claimed(settings, [x.id for x in letters.values() if x.id not in markers])
    for letter in letters.values():
        if letter.id in markers:
            letter.state, letter.redriven_at = LetterState.REDRIVEN, markers[letter.id]
        elif letter.id in claimed:
            letter.state, letter.redriven_at = LetterState.REDRIVEN, claimed[letter.id]
    found = list(letters.values())
    if include_redriven:
        return found
    return [x for x in found if x.state == LetterState.OPEN]


def _read_dlq(settings: Settings, topic: str) -> list[Message]:
    from orchestrator.io.kafka.topics import require_topic

    partitions = dict.fromkeys(require_topic(settings, topic).partitions, 0)
    return list(read_partitions(settings, topic, partitions))


def _letter(msg: Message) -> Letter:
    """The letter in one dlq record; an ``unreadable`` letter when it is not one."""
    codec = default_codec()
    where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
    value = msg.value()
    try:
        if value is None:
            raise ValueError("the record has no value")
        env = codec.decode(value)
        if not isinstance(env.payload, DeadLetter):
            raise ValueError(f"a {env.type} record, not a dead letter")
    except Exception as exc:  # anything a garbage record provokes: listed, never raised
        text = str(exc).strip().splitlines()
        return Letter(
            f"unreadable/{msg.partition()}/{msg.offset()}",
            LetterKind.UNREADABLE,
            (msg.key() or b"").decode("utf-8", "replace")[:200],
            msg.timestamp()[1],
            f"unreadable dlq record at {where}: {text[0] if text else type(exc).__name__}"[:500],
            msg.topic() or "",
            msg.partition() or 0,
            msg.offset() or 0,
            None,
            None,
            None,
            where=where,
        )
    d: DeadLetter = env.payload
    activity_id = attempts = None
    kind = LetterKind.RECORD
    if d.value is not None and d.source_partition < 0:
        try:
            inner = codec.decode(d.value)
        except Exception:
            inner = None
        if inner is not None and isinstance(inner.payload, ActivityDeadLettered):
            kind = LetterKind.ACTIVITY
            activity_id = inner.payload.activity_id
            attempts = inner.payload.attempts
    return Letter(
        env.message_id,
        kind,
        env.workflow_id,
        env.recorded_at,
        d.reason,
        d.source_topic,
        d.source_partition,
        d.source_offset,
        activity_id,
        attempts,
        d.value,
        key=d.key,
        where=where,
    )


def _redis(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(
        settings.redis, decode_responses=True, socket_timeout=5, socket_connect_timeout=5
    )


def _claimed(settings: Settings, letter_ids: list[str]) -> dict[str, int]:
    """Letters with a redrive claim in Redis (when Redis answers: markers suffice else)."""
    if not letter_ids:
        return {}
    keys = Keyspace(settings.topic_prefix)
    try:
        r = _redis(settings)
        values = r.mget([keys.redriven(i) for i in letter_ids])
    except redis.RedisError as exc:
        log.warning("redrive claims not read (%s); markers in the dlq only", type(exc).__name__)
        return {}
    found = {}
    for letter_id, value in zip(letter_ids, values, strict=True):
        if value is not None:
            try:
                found[letter_id] = int(json.loads(value)["at"])
            except (ValueError, KeyError, TypeError):
                found[letter_id] = 0
    return found


def redrive(settings: Settings, letter_id: str) -> str:
    """Send one letter out again, once; returns what was done, in one line."""
    found = [x for x in list_letters(settings) if x.id == letter_id]
    if not found:
        raise NotFoundError(f"no dead letter with id '{letter_id}'; see `keel dlq list --all`")
    letter = found[0]
    if letter.kind == LetterKind.UNREADABLE:
        raise CommandRejected(f"dead letter '{letter_id}' is unreadable; nothing to redrive")
    if letter.state == LetterState.REDRIVEN:
        raise CommandRejected(_already(letter_id, letter.redriven_at))
    if letter.kind == LetterKind.RECORD and letter.value is None:
        raise CommandRejected(f"dead letter '{letter_id}' carries no record to send again")
    claim_key = Keyspace(settings.topic_prefix).redriven(letter_id)
    at = now_ms()
    r = _redis(settings)
    try:
        claim = json.dumps({"at": at, "by": _operator()})
        if not r.set(claim_key, claim, nx=True):
            raise CommandRejected(_already(letter_id, _claim_time(str(r.get(claim_key)))))
    except redis.RedisError as exc:
        raise UnavailableError(
            f"Redis did not answer ({type(exc).__name__}); the redrive claim of "
            f"'{letter_id}' was not taken and nothing was sent"
        ) from None
    try:
        done = _send_once(settings, letter, at)
    except KafkaException as exc:
        # The transaction did not commit: nothing went out, so the claim is given back.
        r.delete(claim_key)
        raise UnavailableError(
            f"redrive of '{letter_id}' not sent (Kafka: {exc.args[0]}); nothing was written, "
            "try again"
        ) from None
    return done


def redrive_letters(settings: Settings, letters: list[Letter]) -> list[str]:
    """Send ``letters`` (open record letters, already listed) out again, each at most once:
    one Redis claim per letter (a letter claimed elsewhere is skipped), then every claimed
    record and its marker in one Kafka transaction. The ids sent, in order."""
    at = now_ms()
    r = _redis(settings)
    keys = Keyspace(settings.topic_prefix)
    claim = json.dumps({"at": at, "by": _operator()})
    try:
        mine = [x for x in letters if r.set(keys.redriven(x.id), claim, nx=True)]
    except redis.RedisError as exc:
        raise UnavailableError(
            f"Redis did not answer ({type(exc).__name__}); no parked letter was redriven"
        ) from None
    if not mine:
        return []
    try:
        _send(settings, mine, at, f"{settings.topic_prefix}.redrive.{mine[0].id}")
    except KafkaException as exc:
        r.delete(*(keys.redriven(x.id) for x in mine))  # nothing went out: give them back
        raise UnavailableError(
            f"parked letters not redriven (Kafka: {exc.args[0]}); nothing was written"
        ) from None
    return [x.id for x in mine]


def _send_once(settings: Settings, letter: Letter, at: int) -> str:
    """The redriven record and its marker, in one Kafka transaction."""
    return _send(settings, [letter], at, f"{settings.topic_prefix}.redrive.{letter.id}")


def _send(settings: Settings, letters: list[Letter], at: int, txn_id: str) -> str:
    """The redriven records and their markers, in one Kafka transaction."""
    producer = transactional_producer(settings, txn_id)
    timeout = settings.admin_timeout_s
    done = ""
    try:
        producer.begin_transaction()
        for letter in letters:
            done = _produce_one(settings, producer, letter, at)
        producer.commit_transaction(timeout)
    except KafkaException:
        with contextlib.suppress(KafkaException):
            producer.abort_transaction(timeout)
        raise
    return done


def _produce_one(settings: Settings, producer: Any, letter: Letter, at: int) -> str:
    """Produce one letter's redrive and its marker (inside the caller's transaction)."""
    codec = default_codec()
    if letter.kind == LetterKind.ACTIVITY:
        assert letter.activity_id is not None
        command = command_envelope(
            f"redrive/{letter.id}",
            letter.workflow_id,
            RedriveActivity(letter.activity_id),
            at,
            correlation_id=letter.workflow_id,
        )
        producer.produce(
            settings.topic("commands"),
            key=letter.workflow_id.encode(),
            value=codec.encode(command),
        )
        done = f"redrive of activity '{letter.activity_id}' sent to {letter.workflow_id}"
    else:
        key = letter.key if letter.key is not None else letter.workflow_id.encode() or None
        producer.produce(letter.source_topic, key=key, value=letter.value)
        done = f"record sent again to {letter.source_topic}"
    producer.produce(
        settings.topic("dlq"),
        key=letter.id.encode(),
        value=codec.encode(_marker(settings, letter, at)),
        headers=[(MARKER_HEADER, letter.id.encode())],
    )
    return done


def _marker(settings: Settings, letter: Letter, at: int) -> Envelope[Any]:
    return runtime_envelope(
        f"redriven/{letter.id}",
        letter.workflow_id,
        "",
        DeadLetter(
            settings.topic("dlq"),
            -1,
            -1,
            f"redrive marker: dead letter '{letter.id}' ({letter.where}) was redriven "
            f"by {_operator()}",
            letter.id.encode(),
            None,
        ),
        at,
        causation_id=letter.id,
    )


def _operator() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:
        return "unknown operator"


def _claim_time(value: str | None) -> int | None:
    try:
        return int(json.loads(value or "")["at"])
    except (ValueError, KeyError, TypeError):
        return None


def _already(letter_id: str, at: int | None) -> str:
    from datetime import UTC, datetime

    when = f" at {datetime.fromtimestamp(at / 1000, UTC):%Y-%m-%d %H:%M:%S} UTC" if at else ""
    return f"dead letter '{letter_id}' was already redriven{when}; a second redrive is refused"
