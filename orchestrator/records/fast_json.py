"""JSON on the hot path: orjson, with the standard library for what orjson refuses.

The projector writes a state and a history line per event after every batch, and the
command loop a header per decision; with the standard library's encoder that was a
seventh of the orchestrator's GIL under load (git show 6f66b40:docs/performance.md, "The projector's
JSON, its Redis write, and frozen objects built faster"). orjson is several times
faster. What it refuses (integers past 64 bits, keys that are not strings) goes to the
standard library, so every value written before is still written. Bytes can differ
from the standard library's (compact separators, non-ASCII characters as UTF-8 instead
of ``\\u`` escapes), not the value ``json.loads`` reads back; with one exception: a float
``NaN`` or infinity (only a payload's own JSON text can hold one) is written as ``null``,
where the standard library wrote ``NaN``/``Infinity``, which are not JSON.

The pure domain keeps the standard library; this module is handed to it as the encoder
(``WorkflowState.to_json(encode)``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import orjson

from orchestrator.config.redaction import clip
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.limits import MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES, loads_bounded


def dumps(value: Any) -> str:
    """Compact JSON of ``value``; anything else in it is written as its ``str``."""
    try:
        return orjson.dumps(value, default=str).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, default=str, separators=(",", ":"))


def dumps_sorted(value: Any) -> str:
    """Compact JSON of ``value`` with sorted keys (a state's read-model and snapshot text)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))


def dumps_bytes(value: Any) -> bytes:
    """Compact JSON of ``value`` as UTF-8 bytes (a header value)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def dumps_commands(commands: Sequence[Sequence[Any]]) -> str:
    """Redis commands as one JSON array of arrays of strings, for a script to run.

    Each argument becomes the text redis-py would send: a ``str`` (an enum's value
    included) as it is, an ``int`` or ``float`` by its ``repr``. ``TypeError`` for one
    that JSON text cannot carry exactly (bytes, a lone surrogate): the caller writes
    those commands another way.
    """
    return orjson.dumps(
        [[a if isinstance(a, str) else _argument(a) for a in args] for args in commands]
    ).decode()


def _argument(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a {type(value).__name__} cannot travel as a JSON command argument")
    return repr(value)


def loads_within_limits(text: str, what: str) -> Any:
    """``loads_bounded`` with orjson's parser when the text passes its cheap checks.

    orjson takes a text only if it cannot break a limit (size, nesting) and holds no run
    of digits that could be an integer past 64 bits (orjson would read it as a float).
    It refuses some texts the standard library accepts (``NaN``): then, and for every
    other text, ``loads_bounded`` decides, so the outcome is the standard library's.
    """
    if (
        len(text) <= _FAST_MAX_CHARS
        and text.count("[") + text.count("{") <= _FAST_MAX_OPEN
        and _LONG_DIGITS.search(text) is None
    ):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return loads_bounded(text, what)


def loads_input(text: str | bytes, what: str, limit: int = MAX_PAYLOAD_BYTES) -> Any:
    """JSON from outside Keel (a webhook or decision body, a CLI argument, a UI form):
    ``loads_bounded``'s rules, and no object holding one key twice.

    Readers disagree on a repeated key (Python's keeps the last, others the first), so a
    body could mean ``reject`` to one check and ``approve`` to the next: it is refused
    (``InvalidInputError``) instead, at every edge, before anything is sent. Records Keel
    wrote are read as they always were (``loads_bounded``): an old event stays readable.
    """
    value = loads_bounded(text, what, limit)
    if ("{" in text) if isinstance(text, str) else (b"{" in text):  # else no object
        json.loads(text, object_pairs_hook=_unique_keys(what), parse_int=str, parse_float=str)
    return value


def _unique_keys(what: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise InvalidInputError(f"{what} holds the key {clip(key)!r} twice in one object")
            seen.add(key)

    return pairs


#: 19 digits or more may be an integer past 64 bits.
_LONG_DIGITS = re.compile(r"\d{19}")
#: Below these a text cannot break a limit (``MAX_PAYLOAD_BYTES`` counts UTF-8 bytes, at
#: most four per character; ``MAX_JSON_DEPTH`` bounds nesting by the openers' count).
_FAST_MAX_CHARS = MAX_PAYLOAD_BYTES // 4
_FAST_MAX_OPEN = MAX_JSON_DEPTH
