"""Recorded histories in and out: from ``keel.events`` (and ``keel.commands``), to and
from JSON-lines files of the Avro-decoded envelopes (docs/versioning.md).

One line per envelope: ``{"message_id", "workflow_id", "run_id", "seq", "type",
"recorded_at", "payload": {field: value}, "causation_id", "correlation_id"}``. The
payload's fields are those of its dataclass in :mod:`orchestrator.domain.model.messages`, so
any event or command type round-trips without code here; a field a file lacks takes its
default (a file written before the field existed). Commands are exported next to the
events they caused while ``keel.commands`` still holds them (7 days): they give replay the
command's own clock.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from orchestrator.config.settings import Settings
from orchestrator.domain.history.invariants import (
    ChildLinks,
    HistoryChecker,
    Invariant,
    ProofCheck,
    Violation,
)
from orchestrator.domain.model.errors import HistoryError, InvalidInputError
from orchestrator.domain.model.messages import PAYLOAD_TYPES, Envelope
from orchestrator.io.kafka.clients import list_partitions, read_partitions
from orchestrator.payload_schemas.codec import DecodeError, codec_for

__all__ = [
    "HISTORY_SUFFIX",
    "Verification",
    "envelope_from_dict",
    "envelope_to_dict",
    "read_history_dir",
    "read_history_file",
    "read_topic_history",
    "verify_topic",
    "write_history",
]

#: Exported history files end with this.
HISTORY_SUFFIX = ".jsonl"
_ENVELOPE_FIELDS = (
    "message_id",
    "workflow_id",
    "run_id",
    "seq",
    "type",
    "recorded_at",
    "causation_id",
    "correlation_id",
)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, frozenset | set | tuple):
        return list(value)
    return value


def envelope_to_dict(env: Envelope[Any]) -> dict[str, Any]:
    """The JSON object of one envelope (the trace context is left out: not history)."""
    d: dict[str, Any] = {name: getattr(env, name) for name in _ENVELOPE_FIELDS}
    p = env.payload
    d["payload"] = {f.name: _plain(getattr(p, f.name)) for f in dataclasses.fields(p)}
    return d


def envelope_from_dict(d: Any) -> Envelope[Any]:
    """The envelope a JSON object describes; ``InvalidInputError`` says what is wrong."""
    if not isinstance(d, dict):
        raise InvalidInputError(f"an envelope must be a JSON object, got {type(d).__name__}")
    missing = [n for n in (*_ENVELOPE_FIELDS[:6], "payload") if n not in d]
    if missing:
        raise InvalidInputError(f"envelope lacks {', '.join(missing)}")
    cls = PAYLOAD_TYPES.get(d["type"]) if isinstance(d["type"], str) else None
    if cls is None:
        raise InvalidInputError(f"unknown payload type {str(d['type'])[:80]!r}")
    body = d["payload"]
    if not isinstance(body, dict):
        raise InvalidInputError(f"payload of {cls.__name__} must be a JSON object")
    names = {f.name for f in dataclasses.fields(cls)}
    extra = sorted(set(body) - names)
    if extra:
        raise InvalidInputError(f"{cls.__name__} has no field {', '.join(extra)}")
    values = {
        k: base64.b64decode(v["$bytes"]) if isinstance(v, dict) and "$bytes" in v else v
        for k, v in body.items()
    }
    try:
        payload = cls(**values)
    except TypeError as exc:
        raise InvalidInputError(f"{cls.__name__}: {exc}") from None
    return Envelope(
        message_id=d["message_id"],
        workflow_id=d["workflow_id"],
        run_id=d["run_id"],
        seq=d["seq"],
        type=d["type"],
        recorded_at=d["recorded_at"],
        payload=payload,
        causation_id=d.get("causation_id"),
        correlation_id=d.get("correlation_id"),
    )


def write_history(envelopes: Iterable[Envelope[Any]], out: IO[str]) -> int:
    """Write one JSON line per envelope; returns how many."""
    n = 0
    for env in envelopes:
        out.write(json.dumps(envelope_to_dict(env), sort_keys=True, ensure_ascii=False))
        out.write("\n")
        n += 1
    return n


def read_history_file(path: Path | str) -> list[Envelope[Any]]:
    """Every envelope of an exported file; a bad line is a ``HistoryError`` naming it."""
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(envelope_from_dict(json.loads(line)))
            except (ValueError, InvalidInputError) as exc:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise HistoryError(f"{path}:{lineno}: {reason}") from None
    return out


def read_history_dir(root: Path | str) -> Iterator[Envelope[Any]]:
    """Every envelope of every ``*.jsonl`` under ``root`` (sorted by path)."""
    root = Path(root)
    if not root.is_dir():
        raise InvalidInputError(f"{root} is not a directory of histories")
    for path in sorted(root.rglob(f"*{HISTORY_SUFFIX}")):
        yield from read_history_file(path)


def _partitions(settings: Settings, topic: str) -> list[int]:
    partitions = list_partitions(settings, topic)
    if not partitions:
        raise InvalidInputError(f"topic {topic} does not exist at {settings.kafka_servers}")
    return partitions


def _read(settings: Settings, kind: str, workflow_ids: set[str] | None) -> Iterator[Envelope[Any]]:
    topic = settings.topic(kind)
    codec = codec_for(settings)
    wanted = None if workflow_ids is None else {w.encode() for w in workflow_ids}
    starts = dict.fromkeys(_partitions(settings, topic), 0)
    for msg in read_partitions(settings, topic, starts):
        if wanted is not None and msg.key() not in wanted:
            continue
        try:
            yield codec.decode(msg.value() or b"")
        except DecodeError as exc:
            raise HistoryError(
                f"{topic}[{msg.partition()}]@{msg.offset()} cannot be decoded: {exc}"
            ) from None


def read_topic_history(
    settings: Settings, workflow_ids: Iterable[str] | None = None, *, commands: bool = True
) -> list[Envelope[Any]]:
    """The events of ``workflow_ids`` (every workflow when None) from ``keel.events``,
    followed by the commands still in ``keel.commands`` that caused them."""
    ids = None if workflow_ids is None else set(workflow_ids)
    events = list(_read(settings, "events", ids))
    if not commands:
        return events
    causes = {e.causation_id for e in events if e.causation_id}
    cmds = [
        c
        for c in _read(settings, "commands", ids)
        if c.message_id in causes and getattr(c.payload, "KIND", "") == "command"
    ]
    return events + cmds


@dataclass
class Verification:
    """What ``verify_topic`` read and every invariant it found broken."""

    #: The workflows whose events were read, in the order first seen.
    checked: list[str] = field(default_factory=list)
    events: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def workflows(self) -> int:
        return len(self.checked)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass(slots=True)
class _Tracked:
    checker: HistoryChecker
    partition: int


def verify_topic(
    settings: Settings,
    workflow_ids: Iterable[str] | None = None,
    *,
    proof_ok: ProofCheck | None = None,
) -> Verification:
    """Check the invariants (:mod:`orchestrator.domain.history.invariants`) of ``workflow_ids``
    (every workflow when None) from ``keel.events``, read once from the start.

    Each workflow keeps a streaming checker, not its envelopes, so the memory of a scan
    grows with the workflows and their activities, not with the topic. A record that
    cannot be decoded, has no value, is keyed by another workflow than its envelope's,
    or lies in another partition than the workflow's first event is an
    ``Invariant.RECORD`` violation (named by topic, partition and offset): the scan
    goes on.
    """
    topic = settings.topic("events")
    codec = codec_for(settings)
    wanted = None if workflow_ids is None else {w.encode() for w in workflow_ids}
    tracked: dict[str, _Tracked] = {}
    links = ChildLinks()
    stray: list[Violation] = []
    out = Verification()
    starts = dict.fromkeys(_partitions(settings, topic), 0)
    for msg in read_partitions(settings, topic, starts):
        key = msg.key()
        if wanted is not None and key not in wanted:
            continue
        out.events += 1
        part = msg.partition() or 0
        where = f"{topic}[{part}]@{msg.offset()}"
        key_text = (key or b"").decode("utf-8", "replace")
        value = msg.value()
        try:
            env = codec.decode(value) if value is not None else None
        except DecodeError as exc:
            stray.append(Violation(key_text, 0, Invariant.RECORD, f"{where} undecodable: {exc}"))
            continue
        if env is None:
            stray.append(Violation(key_text, 0, Invariant.RECORD, f"{where} has no value"))
            continue
        if env.workflow_id != key_text:
            stray.append(
                Violation(
                    env.workflow_id,
                    env.seq,
                    Invariant.RECORD,
                    f"{where} {env.type} is keyed {key_text!r}, not by its workflow",
                )
            )
        t = tracked.get(env.workflow_id)
        if t is None:
            t = tracked[env.workflow_id] = _Tracked(HistoryChecker(env.workflow_id, proof_ok), part)
        elif t.partition != part:
            stray.append(
                Violation(
                    env.workflow_id,
                    env.seq,
                    Invariant.RECORD,
                    f"{where} {env.type}: the workflow's events began in partition {t.partition}",
                )
            )
        t.checker.feed(env)
        links.feed(env)
    out.checked = list(tracked)
    for t in tracked.values():
        out.violations.extend(t.checker.finish())
    if wanted is None:  # a child's start is another workflow's: checked over the whole topic
        out.violations.extend(links.finish())
    out.violations.extend(stray)
    return out
