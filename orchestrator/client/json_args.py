"""JSON given to Keel from outside (the CLI's options, the UI's forms, a client's input and
payloads), checked before anything is sent: every limit of docs/limits.md, standard JSON
only, no key twice in one object; a bad value is one :class:`InvalidInputError` line."""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel

from orchestrator.domain.model.errors import InvalidInputError, KeelError, LimitExceededError
from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES
from orchestrator.records.fast_json import loads_input

__all__ = ["input_value", "parse_json", "payload_json", "read_json_arg"]

#: ``--input @FILE`` and ``--input -`` read at most this much more than the limit.
_READ_SLACK = 16


def read_json_arg(value: str, what: str) -> Any:
    """An option's JSON: inline text, ``@path`` (a file) or ``-`` (stdin), within the limits.

    Every limit of docs/limits.md is checked before the value is used
    (:func:`~orchestrator.domain.model.limits.loads_bounded`), so a deep or huge value is one line.
    """
    text = value
    if value == "-":
        text = sys.stdin.read(MAX_PAYLOAD_BYTES + _READ_SLACK)
        what = f"{what} (stdin)"
    elif value.startswith("@"):
        path = value[1:]
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read(MAX_PAYLOAD_BYTES + _READ_SLACK)
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidInputError(f"cannot read {what} file '{path}': {reason}") from None
        what = f"{what} file '{path}'"
    return parse_json(text, what)


def parse_json(text: str | bytes, what: str) -> Any:
    """JSON given to Keel (the CLI's and the UI's): ``loads_input``'s rules (the limits, no
    key twice in one object), one ``InvalidInputError`` line else."""
    try:
        return loads_input(text, what)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        if isinstance(exc, KeelError):
            raise
        raise InvalidInputError(f"{what} is not valid JSON: {exc}") from None


def payload_json(value: Any, what: str) -> str:
    """A JSON value as the text a command carries, refused (:class:`InvalidInputError`,
    nothing sent) unless it is standard JSON within docs/limits.md: no ``NaN``, infinity,
    lone surrogate or value past a limit (the rule of ``loads_bounded``)."""
    try:
        text = json.dumps(value)
    except RecursionError:
        raise LimitExceededError(f"{what} nests too deep") from None
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} is not JSON: {exc}") from None
    parse_json(text, what)
    return text


def input_value(input_obj: Any, what: str) -> Any:
    """A start's input as the JSON value it stands for, checked as :func:`payload_json`
    does: JSON text (``str``, or ``bytes`` in UTF-8) parsed, a pydantic model dumped."""
    if isinstance(input_obj, str | bytes):
        return parse_json(input_obj, what)
    if isinstance(input_obj, BaseModel):
        return input_obj.model_dump(mode="json")
    payload_json(input_obj, what)
    return input_obj
