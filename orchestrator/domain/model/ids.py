"""The one rule for workflow ids, enforced by the client, the connector and the orchestrator.

An id is 1 to 200 characters: an ASCII letter or digit first, then letters, digits and
``. _ - : @ = +``. So an id never starts with ``_`` (reserved for Keel's own keys, such
as the checkpoint marker), never holds a space, a control character, ``/`` or rich
markup brackets, and fits comfortably in a Kafka key and a Redis key. Content hashes
(``sha256:ab12...``) and business keys (``invoice-2026-0042``) fit.
"""

from __future__ import annotations

import re

from orchestrator.domain.model.errors import InvalidIdError

__all__ = ["MAX_ID_LENGTH", "check_workflow_id", "is_valid_workflow_id"]

MAX_ID_LENGTH = 200
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,199}")


def is_valid_workflow_id(value: object) -> bool:
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def check_workflow_id(value: object) -> str:
    """``value`` when it is a valid workflow id; else one line saying what is wrong."""
    if is_valid_workflow_id(value):
        return value  # type: ignore[return-value]
    if not isinstance(value, str):
        raise InvalidIdError(f"a workflow id must be text, got {type(value).__name__}")
    if not value:
        raise InvalidIdError("a workflow id must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"workflow id is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    shown = value.encode("unicode_escape").decode("ascii")[:60]
    raise InvalidIdError(
        f"invalid workflow id '{shown}': use 1-{MAX_ID_LENGTH} characters, a letter or digit "
        "first, then letters, digits and . _ - : @ = +"
    )
