"""Size limits as policy (docs/limits.md): what Keel accepts, checked before anything is written.

Every record Keel writes must stay well under the broker's 1 MiB default record size, so
each free-form JSON value (an input, a signal payload, a result, heartbeat details) is
bounded, and so are its nesting depth, its integers and every duration. The client
checks these first (a clear error, nothing written); the decider checks them again,
because it is the authority and commands can come from any producer. Large documents
belong in object storage: pass a reference (a URL and a digest), not the bytes.

One input rule holds at every edge (CLI, client, connector, worker, orchestrator): a
JSON value is standard JSON (RFC 8259) in valid UTF-8. ``NaN``, ``Infinity``, a number
that overflows a double (``1e400``), a lone surrogate (``"\ud800"``) and invalid UTF-8
are refused by :func:`loads_bounded`, so no event ever holds a value another JSON reader
refuses (docs/limits.md).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields
from typing import Any

from pydantic import TypeAdapter, ValidationError

from orchestrator.domain.model.errors import LimitExceededError
from orchestrator.domain.model.frozen_init import replace

__all__ = [
    "CONTINUE_WINDOW_MS",
    "MAX_CONTINUES_PER_WINDOW",
    "MAX_DURATION_MS",
    "MAX_FAN_OUT_ITEMS",
    "MAX_HISTORY_BYTES",
    "MAX_HISTORY_EVENTS",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_REASON_CHARS",
    "check_duration_ms",
    "check_json_text",
    "check_payload_size",
    "clip_reasons",
    "loads_bounded",
    "parse_json",
]

#: One JSON value: a workflow input, a signal payload, an activity result or input.
MAX_PAYLOAD_BYTES = 256 * 1024
#: Nesting of arrays and objects in one JSON value.
MAX_JSON_DEPTH = 64
#: Digits of one JSON integer (beyond 2**53 JSON numbers are not portable anyway).
MAX_INT_DIGITS = 64
#: A surrogate escape (paired or not): only one that is paired decodes to valid Unicode.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: Text the fast parser must not take, found in one scan: an integer past the limit, or
#: what standard JSON does not allow (a ``NaN`` / ``Infinity`` constant, an exponent that
#: may overflow a double, a surrogate escape).
_CAREFUL = re.compile(
    rf"\d{{{MAX_INT_DIGITS + 1},}}|NaN|Infinity|[eE][+-]?\d{{3}}|{_SURROGATE_ESCAPE.pattern}"
)
#: Events in one run's history; past it the run needs attention (continue-as-new instead).
MAX_HISTORY_EVENTS = 50_000
#: Continue-as-new budget of one workflow (docs/limits.md): at most this many
#: ``WorkflowContinuedAsNew`` within any ``CONTINUE_WINDOW_MS`` of recorded time; one more
#: waits on a durable timer until the oldest of them leaves the window.
MAX_CONTINUES_PER_WINDOW = 100
CONTINUE_WINDOW_MS = 60_000
#: Encoded payload bytes of one run's history.
MAX_HISTORY_BYTES = 64 * 1024 * 1024
#: The longest durable timer or timeout: 10 years.
MAX_DURATION_MS = 10 * 366 * 24 * 3600 * 1000
#: Reasons and messages recorded in events are cut to this many characters.
MAX_REASON_CHARS = 2000
#: Items one fan-out step maps over in one state visit (docs/fan-out.md): about two
#: events each, far below ``MAX_HISTORY_EVENTS``; a longer list is split into chunks
#: across continue-as-new runs.
MAX_FAN_OUT_ITEMS = 1000


_ANY: TypeAdapter[Any] = TypeAdapter(Any)


def parse_json(text: str) -> Any:
    """``json.loads(text)``, 2-3x faster on the small documents a run carries.

    pydantic's parser gives the same values (big integers, floats, infinities, duplicate
    keys); what it refuses (e.g. a lone surrogate) the standard library decides, so what
    is accepted and every error message stay ``json.loads``'.
    """
    try:
        return _ANY.validate_json(text)
    except ValidationError:
        return json.loads(text)


def check_payload_size(text: str, what: str, limit: int = MAX_PAYLOAD_BYTES) -> None:
    _check_size(len(text.encode("utf-8", "surrogatepass")), what, limit)


def _check_size(size: int, what: str, limit: int) -> None:
    if size > limit:
        raise LimitExceededError(
            f"{what} is {size:,} bytes; the limit is {limit:,} bytes "
            "(store large documents elsewhere and pass a reference)"
        )


def _check_depth(text: str, what: str) -> None:
    """Nesting depth by a linear scan (``json.loads`` would recurse first)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise LimitExceededError(
                    f"{what} nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
                )
        elif ch in "]}":
            depth -= 1


def _parse_int(what: str) -> Any:
    def parse(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise LimitExceededError(
                f"{what} holds an integer of {len(digits.lstrip('-'))} digits; "
                f"the limit is {MAX_INT_DIGITS}"
            )
        return int(digits)

    return parse


def _refuse_constant(what: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{what} holds {name}, which is not standard JSON (RFC 8259)")

    return refuse


def _finite_float(what: str) -> Any:
    def parse(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{what} holds the number {text[:40]}, which overflows a double")
        return value

    return parse


def _utf8_size(text: str | bytes | bytearray, what: str) -> tuple[str, int]:
    """``text`` as a str that encodes to valid UTF-8, and its size in bytes (one encode);
    else ``ValueError`` naming where."""
    if not isinstance(text, str):
        try:
            return bytes(text).decode("utf-8"), len(text)
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{what} is not valid UTF-8 (byte {exc.start}: {exc.reason})"
            ) from None
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} holds a lone surrogate (U+{ord(text[exc.start]):04X}), "
            "which is not valid Unicode"
        ) from None


def loads_bounded(text: str | bytes, what: str, limit: int = MAX_PAYLOAD_BYTES) -> Any:
    """Parse JSON ``text`` within every limit and the input rule (the module doc);
    ``LimitExceededError`` or ``ValueError`` else."""
    text, size = _utf8_size(text, what)
    _check_size(size, what, limit)
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:  # else it cannot nest deeper
        _check_depth(text, what)
    if _CAREFUL.search(text) is None:
        return parse_json(text)  # nothing past a limit or non-standard: the fast parser
    value = json.loads(
        text,
        parse_int=_parse_int(what),
        parse_float=_finite_float(what),
        parse_constant=_refuse_constant(what),
    )
    if _SURROGATE_ESCAPE.search(text):  # a lone one decodes to a str UTF-8 cannot hold
        _utf8_size(json.dumps(value, ensure_ascii=False), what)
    return value


def check_json_text(text: str, what: str, limit: int = MAX_PAYLOAD_BYTES) -> None:
    """Raise unless ``text`` is JSON within the limits (the value itself is discarded)."""
    loads_bounded(text, what, limit)


def check_duration_ms(ms: int | float, what: str) -> int:
    if ms != ms or ms < 0:
        raise LimitExceededError(f"{what} must be >= 0 seconds")
    if ms > MAX_DURATION_MS:
        raise LimitExceededError(
            f"{what} is longer than the limit of {MAX_DURATION_MS // (24 * 3600 * 1000):,} days"
        )
    return int(ms)


def clip_reasons(payload: Any) -> Any:
    """``payload`` (an event) with its reason, message and error type cut to
    ``MAX_REASON_CHARS``: free text a definition or a worker wrote stays bounded."""
    names = _CLIPPED.get(type(payload))
    if names is None:
        names = _CLIPPED[type(payload)] = tuple(
            f.name for f in fields(payload) if f.name in ("reason", "message", "error_type")
        )
    long = {
        name: getattr(payload, name)[: MAX_REASON_CHARS - 1] + "…"
        for name in names
        if len(getattr(payload, name)) > MAX_REASON_CHARS
    }
    return replace(payload, **long) if long else payload


_CLIPPED: dict[type, tuple[str, ...]] = {}


#: Keel's built-in definitions' names start with this (``keel.schedule``, docs/schedules.md):
#: not the user's to start by name, so an unknown workflow's error lists only the application's.
BUILTIN_PREFIX = "keel."
