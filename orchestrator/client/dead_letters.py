"""The dead-letter queue seen by an operator: list what is there, send it out again or
discard it, once (docs/activities.md, "Dead letters").

The dlq holds what needs an operator, and only that. Three kinds of letters live there:

* an **activity** past its retry bounds (from an ``ActivityDeadLettered`` event): its
  workflow waits in ``needs_attention``; redrive sends ``RedriveActivity``, a new
  attempt of the same logical attempt under the same idempotency key;
* a **record** that could not be processed (undecodable, misrouted, too large, a run's
  command kept while its version is missing): redrive produces the original bytes to
  their source topic again, e.g. after a fix is deployed;
* an **unreadable** record in the dlq itself (not a dead letter Keel can decode): listed
  with the reason, never redriven, but it can be discarded.

A command a run refuses is not a letter: the run records it (``CommandRefused``).

A letter is closed at most once, by a redrive or a discard: the operator first takes a
Redis claim (``SET NX`` at ``Keyspace.redriven``, one key per letter for both) so two
concurrent closings cannot both happen, then one Kafka transaction produces the redriven
record (for a redrive) *and* a marker record in the dlq (keyed by the letter id, header
``keel-redriven`` or ``keel-discarded``; a discard's marker holds who, when and why), so
the marker exists exactly when the closing happened. A letter with a marker (or a claim)
is ``redriven`` or ``discarded``: hidden from ``keel dlq list`` unless ``--all``, and a
second redrive or discard is refused.
"""

from __future__ import annotations

import getpass
import json
import logging
import socket
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import (
    CommandRejected,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    iso_utc,
)
from orchestrator.domain.model.messages import (
    ActivityDeadLettered,
    DeadLetter,
    Envelope,
    RedriveActivity,
)
from orchestrator.io.kafka.clients import ClientMessage, header
from orchestrator.io.kafka.dead_letter_log import (
    OutRecord,
    TransactionNotCommitted,
    read_topic_records,
    write_in_one_transaction,
)
from orchestrator.io.redis.dead_letter_claims import ClaimsUnavailable, LetterClaims
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.records.envelopes import command_envelope, now_ms, runtime_envelope

__all__ = [
    "DISCARD_HEADER",
    "MARKER_HEADER",
    "DeadLetters",
    "Letter",
    "LetterKind",
    "LetterState",
]

log = logging.getLogger("keel.dlq")

#: Header of a redrive marker record in the dlq; its value is the letter id.
MARKER_HEADER = "keel-redriven"
#: Header of a discard marker record in the dlq; its value is the letter id.
DISCARD_HEADER = "keel-discarded"
#: The longest reason a discard records.
MAX_DISCARD_REASON = 1000


class LetterKind(StrEnum):
    ACTIVITY = "activity"
    RECORD = "record"
    UNREADABLE = "unreadable"


class LetterState(StrEnum):
    OPEN = "open"
    REDRIVEN = "redriven"
    DISCARDED = "discarded"


#: The marker header of each way to close a letter.
_HEADERS = {MARKER_HEADER: LetterState.REDRIVEN, DISCARD_HEADER: LetterState.DISCARDED}


@dataclass(frozen=True)
class Closing:
    """How a letter was closed: redriven or discarded, when (epoch ms), by whom, why."""

    state: LetterState
    at: int | None
    by: str = ""
    reason: str = ""


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
    closing: Closing | None = None
    where: str = field(default="", repr=False)  # the letter's own place in the dlq
    #: Its place in the dlq, (partition, offset): the order of letters of the same time.
    place: tuple[int, int] = (0, 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "workflow_id": self.workflow_id,
            "activity_id": self.activity_id,
            "attempts": self.attempts,
            "reason": self.reason,
            "recorded_at": self.recorded_at,
            "time": shown_time(self.recorded_at),
            "redriven_at": self.redriven_at,
            "closed_at": self.closing.at if self.closing else None,
            "closed_by": self.closing.by if self.closing else None,
            "close_reason": self.closing.reason if self.closing else None,
            "source": f"{self.source_topic}[{self.source_partition}]@{self.source_offset}",
        }


def shown_time(ms: int | None) -> str:
    """A time as every message shows one (``errors.iso_utc``); ``""`` for none."""
    return iso_utc(ms) if ms else ""


class DeadLetters:
    """The dead letters of one deployment: listed, redriven and discarded, each at most
    once (``KeelClient.dead_letters``; ``keel dlq``; the UI). Holds the deployment's
    settings and the codec its records are read and written with."""

    def __init__(self, settings: Settings, codec: Codec | None = None) -> None:
        self.settings = settings
        self.codec = codec or codec_for(settings)

    def letters(self, *, include_closed: bool = True, newest_first: bool = False) -> list[Letter]:
        """Every letter in the dlq with its state, ordered by time across partitions
        (oldest first; ties by partition and offset)."""
        return _list_letters(self.settings, self.codec, include_closed, newest_first)

    def redrive(self, letter_id: str) -> str:
        """Send one letter out again, once; returns what was done, in one line."""
        return _redrive(self.settings, self.codec, letter_id)

    def discard(self, letter_id: str, reason: str, actor: str | None = None) -> str:
        """Close one letter without sending anything, once, with who, when and why
        recorded (a claim in Redis and a marker in the dlq, as a redrive); returns it in
        one line."""
        return _discard(self.settings, self.codec, letter_id, reason, actor)

    def redrive_each(self, letters: list[Letter]) -> list[str]:
        """Send ``letters`` (open record letters, already listed) out again, each at most
        once: one Redis claim per letter (a letter claimed elsewhere is skipped), then
        every claimed record and its marker in one Kafka transaction. The ids sent."""
        return _redrive_letters(self.settings, self.codec, letters)


def _list_letters(
    settings: Settings, codec: Codec, include_closed: bool, newest_first: bool
) -> list[Letter]:
    topic = settings.topic("dlq")
    records = read_topic_records(settings, topic)
    letters: dict[str, Letter] = {}
    markers: dict[str, Closing] = {}
    for msg in records:
        marker = _closing_of(codec, msg)
        if marker is not None:
            markers.setdefault(*marker)
            continue
        letter = _letter(codec, msg)
        letters.setdefault(letter.id, letter)  # a letter produced twice is one letter
    claimed = _claimed(settings, [x.id for x in letters.values() if x.id not in markers])
    for letter in letters.values():
        closing = markers.get(letter.id) or claimed.get(letter.id)
        if closing is not None:
            letter.state, letter.closing = closing.state, closing
            if closing.state == LetterState.REDRIVEN:
                letter.redriven_at = closing.at
    found = sorted(letters.values(), key=lambda x: (x.recorded_at, x.place))
    if newest_first:
        found.reverse()
    if include_closed:
        return found
    return [x for x in found if x.state == LetterState.OPEN]


def _closing_of(codec: Codec, msg: ClientMessage) -> tuple[str, Closing] | None:
    """The letter id a marker record closes, and how; None for a letter."""
    for name, state in _HEADERS.items():
        letter_id = header(msg, name)
        if letter_id is None:
            continue
        by = why = ""
        try:
            d = codec.decode(msg.value() or b"").payload
            if isinstance(d, DeadLetter) and d.value:
                info = json.loads(d.value)
                by, why = str(info.get("by", "")), str(info.get("reason", ""))
        except Exception:  # a marker without the details still closes its letter
            pass
        return letter_id, Closing(state, msg.timestamp()[1], by, why)
    return None


def _letter(codec: Codec, msg: ClientMessage) -> Letter:
    """The letter in one dlq record; an ``unreadable`` letter when it is not one."""
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
            place=(msg.partition() or 0, msg.offset() or 0),
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
        place=(msg.partition() or 0, msg.offset() or 0),
    )


def _claimed(settings: Settings, letter_ids: list[str]) -> dict[str, Closing]:
    """Letters with a claim in Redis (when Redis answers: markers suffice else)."""
    try:
        held = LetterClaims(settings).read(letter_ids)
    except ClaimsUnavailable as exc:
        log.warning("dlq claims not read (%s); markers in the dlq only", exc)
        return {}
    return {letter_id: _claim(value) for letter_id, value in held.items()}


def _claim(value: str | None) -> Closing:
    """A claim's closing; a redrive when it says nothing else (claims before discards)."""
    try:
        info = json.loads(value or "")
        state = LetterState(info.get("action", LetterState.REDRIVEN))
        return Closing(state, int(info["at"]), str(info.get("by", "")), str(info.get("reason", "")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return Closing(LetterState.REDRIVEN, None)


def _find(settings: Settings, codec: Codec, letter_id: str) -> Letter:
    found = [x for x in _list_letters(settings, codec, True, False) if x.id == letter_id]
    if not found:
        raise NotFoundError(f"no dead letter with id '{letter_id}'; see `keel dlq list --all`")
    return found[0]


def _redrive(settings: Settings, codec: Codec, letter_id: str) -> str:
    letter = _find(settings, codec, letter_id)
    if letter.kind == LetterKind.UNREADABLE:
        raise CommandRejected(f"dead letter '{letter_id}' is unreadable; nothing to redrive")
    if letter.closing is not None:
        raise CommandRejected(_refusal(letter_id, letter.closing, LetterState.REDRIVEN))
    if letter.kind == LetterKind.RECORD and letter.value is None:
        raise CommandRejected(f"dead letter '{letter_id}' carries no record to send again")
    at = now_ms()
    claim = {"at": at, "by": _operator(), "action": str(LetterState.REDRIVEN)}
    claims = _take_claim(settings, letter_id, claim, LetterState.REDRIVEN)
    try:
        return _send(settings, codec, [letter], at, f"{settings.topic_prefix}.redrive.{letter.id}")
    except TransactionNotCommitted as exc:
        claims.give_back([letter_id])  # nothing went out, so the claim is given back
        raise UnavailableError(
            f"redrive of '{letter_id}' not sent (Kafka: {exc}); nothing was written, try again"
        ) from None


def _discard(
    settings: Settings, codec: Codec, letter_id: str, reason: str, actor: str | None
) -> str:
    reason = " ".join(reason.split())
    if not reason:
        raise InvalidInputError("a discard needs a reason (--reason TEXT)")
    if len(reason) > MAX_DISCARD_REASON:
        raise InvalidInputError(
            f"the reason is {len(reason):,} characters; the limit is {MAX_DISCARD_REASON}"
        )
    by = " ".join((actor or _operator()).split())[:200] or _operator()
    letter = _find(settings, codec, letter_id)
    if letter.closing is not None:
        raise CommandRejected(_refusal(letter_id, letter.closing, LetterState.DISCARDED))
    at = now_ms()
    claim = {"at": at, "by": by, "action": str(LetterState.DISCARDED), "reason": reason}
    claims = _take_claim(settings, letter_id, claim, LetterState.DISCARDED)
    marker = _marker(settings, letter, at, LetterState.DISCARDED, by, reason)
    record = OutRecord(
        settings.topic("dlq"),
        letter.id.encode(),
        codec.encode(marker),
        ((DISCARD_HEADER, letter.id.encode()),),
    )
    try:
        write_in_one_transaction(settings, f"{settings.topic_prefix}.discard.{letter_id}", [record])
    except TransactionNotCommitted as exc:
        claims.give_back([letter_id])  # nothing was written: the claim is given back
        raise UnavailableError(
            f"discard of '{letter_id}' not recorded (Kafka: {exc}); nothing was written, try again"
        ) from None
    return f"dead letter '{letter_id}' discarded by {by}: {reason}"


def _take_claim(
    settings: Settings, letter_id: str, claim: dict[str, Any], action: LetterState
) -> LetterClaims:
    """Take the one claim of ``letter_id`` (``SET NX``), or refuse with who holds it."""
    claims = LetterClaims(settings)
    try:
        held = claims.take(letter_id, json.dumps(claim))
    except ClaimsUnavailable as exc:
        raise UnavailableError(
            f"Redis did not answer ({exc}); the claim of '{letter_id}' was not taken and "
            "nothing was done"
        ) from None
    if held is not None:
        raise CommandRejected(_refusal(letter_id, _claim(held), action))
    return claims


def _redrive_letters(settings: Settings, codec: Codec, letters: list[Letter]) -> list[str]:
    at = now_ms()
    claims = LetterClaims(settings)
    claim = json.dumps({"at": at, "by": _operator(), "action": str(LetterState.REDRIVEN)})
    try:
        taken = set(claims.take_each([x.id for x in letters], claim))
    except ClaimsUnavailable as exc:
        raise UnavailableError(
            f"Redis did not answer ({exc}); no parked letter was redriven"
        ) from None
    mine = [x for x in letters if x.id in taken]
    if not mine:
        return []
    try:
        _send(settings, codec, mine, at, f"{settings.topic_prefix}.redrive.{mine[0].id}")
    except TransactionNotCommitted as exc:
        claims.give_back([x.id for x in mine])  # nothing went out: give them back
        raise UnavailableError(
            f"parked letters not redriven (Kafka: {exc}); nothing was written"
        ) from None
    return [x.id for x in mine]


def _send(settings: Settings, codec: Codec, letters: list[Letter], at: int, txn_id: str) -> str:
    """The redriven records and their markers, in one Kafka transaction; what the last
    one did, in words."""
    records: list[OutRecord] = []
    done = ""
    for letter in letters:
        done = _redrive_records(settings, codec, letter, at, records)
    write_in_one_transaction(settings, txn_id, records)
    return done


def _redrive_records(
    settings: Settings, codec: Codec, letter: Letter, at: int, out: list[OutRecord]
) -> str:
    """One letter's redrive and its marker, appended to ``out``."""
    if letter.kind == LetterKind.ACTIVITY:
        assert letter.activity_id is not None
        command = command_envelope(
            f"redrive/{letter.id}",
            letter.workflow_id,
            RedriveActivity(letter.activity_id),
            at,
            correlation_id=letter.workflow_id,
        )
        out.append(
            OutRecord(
                settings.topic("commands"), letter.workflow_id.encode(), codec.encode(command)
            )
        )
        done = f"redrive of activity '{letter.activity_id}' sent to {letter.workflow_id}"
    else:
        key = letter.key if letter.key is not None else letter.workflow_id.encode() or None
        out.append(OutRecord(letter.source_topic, key, letter.value))
        done = f"record sent again to {letter.source_topic}"
    marker = _marker(settings, letter, at, LetterState.REDRIVEN, _operator())
    out.append(
        OutRecord(
            settings.topic("dlq"),
            letter.id.encode(),
            codec.encode(marker),
            ((MARKER_HEADER, letter.id.encode()),),
        )
    )
    return done


def _marker(
    settings: Settings, letter: Letter, at: int, state: LetterState, by: str, reason: str = ""
) -> Envelope[Any]:
    verb = "redriven" if state == LetterState.REDRIVEN else "discarded"
    details = json.dumps({"by": by, "reason": reason, "at": at}).encode()
    return runtime_envelope(
        f"{verb}/{letter.id}",
        letter.workflow_id,
        "",
        DeadLetter(
            settings.topic("dlq"),
            -1,
            -1,
            f"{state} marker: dead letter '{letter.id}' ({letter.where}) was {verb} by {by}",
            letter.id.encode(),
            details,
        ),
        at,
        causation_id=letter.id,
    )


def _operator() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:
        return "unknown operator"


def _refusal(letter_id: str, closing: Closing, wanted: LetterState) -> str:
    """Why ``wanted`` (a redrive or a discard) is refused: the letter is closed already."""
    when = f" at {iso_utc(closing.at)}" if closing.at else ""
    if closing.state == LetterState.REDRIVEN:
        done = f"dead letter '{letter_id}' was already redriven{when}"
    else:
        by = f" by {closing.by}" if closing.by else ""
        why = f" ({closing.reason})" if closing.reason else ""
        done = f"dead letter '{letter_id}' was already discarded{when}{by}{why}"
    if wanted == closing.state:
        verb = "redrive" if wanted == LetterState.REDRIVEN else "discard"
        return f"{done}; a second {verb} is refused"
    return f"{done}; it cannot be {wanted}"
