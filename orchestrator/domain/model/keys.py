"""Idempotency keys for activity tasks.

``K = workflowId ∥ activityType ∥ logicalAttempt`` (docs/activities.md). Each text part is
percent-escaped with *no* safe characters, so the ``/`` separator can never occur
inside a part and the key parses back to exactly one triple: two different triples
can never share a key, which is what lets a handler's effect store trust it.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote, unquote

__all__ = [
    "CHILD_ACTIVITY_PREFIX",
    "COMPENSATION_SUFFIX",
    "child_workflow_id",
    "compensated_activity",
    "compensation_id",
    "idempotency_key",
    "is_compensation",
    "parse_idempotency_key",
    "visit_tag",
]

_SEP = "/"
#: The activity type of a child-workflow step is this prefix and the child's workflow
#: name; its idempotency key is the child's workflow id (docs/child-workflows.md).
CHILD_ACTIVITY_PREFIX = "keel.child:"
#: A derived child id longer than an id may be is cut and made unique by this many hex
#: digits of the sha256 of the whole.
_CHILD_HASH_DIGITS = 32
_MAX_CHILD_ID = 200


def visit_tag(state: str, visit: int, run_base_seq: int = 0) -> str:
    """The part of every activity and timer id that names one state visit of one run:
    ``<state>#<visit>`` in a workflow's first run (ids as they always were), and
    ``<state>#<visit>@<base>`` in a run a continue-as-new began, ``base`` being the seq of
    its ``WorkflowContinuedAsNew``: visits restart at 1 in each run, the base never
    repeats, so no id of one run is ever another run's (docs/workflows.md)."""
    return f"{state}#{visit}@{run_base_seq}" if run_base_seq else f"{state}#{visit}"


def child_workflow_id(parent_workflow_id: str, activity_id: str) -> str:
    """The derived workflow id of the child run an activity of a parent starts:
    ``<parent>:<state>.<visit>[@<base>].<step>[.<item>]``, within the id rule
    (docs/limits.md); run-scoped like the activity id (:func:`visit_tag`)."""
    tail = activity_id.replace("#", ".").replace("/", ".").replace("[", ".").rstrip("]")
    wid = f"{parent_workflow_id}:{tail}"
    if len(wid) <= _MAX_CHILD_ID:
        return wid
    digest = hashlib.sha256(wid.encode()).hexdigest()[:_CHILD_HASH_DIGITS]
    return f"{wid[: _MAX_CHILD_ID - _CHILD_HASH_DIGITS - 1]}:{digest}"


#: A compensation's activity id is ``<activity id of the effect it undoes>/undo``.
COMPENSATION_SUFFIX = "/undo"


def compensation_id(activity_id: str) -> str:
    """The activity id of the compensation of ``activity_id`` (docs/sagas.md)."""
    return activity_id + COMPENSATION_SUFFIX


def is_compensation(activity_id: str) -> bool:
    """A compensation's activity id (a step's never ends so: step names hold no ``/``)."""
    return activity_id.endswith(COMPENSATION_SUFFIX)


def compensated_activity(activity_id: str) -> str:
    """The activity a compensation undoes (inverse of :func:`compensation_id`)."""
    return activity_id[: -len(COMPENSATION_SUFFIX)]


#: What ``quote(..., safe="")`` leaves as it is (RFC 3986 unreserved): such a part, the
#: usual case, is returned without the ~3 µs of ``quote``.
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")


def _escape(part: str) -> str:
    if _UNRESERVED.fullmatch(part):
        return part
    return quote(part, safe="", encoding="utf-8", errors="surrogatepass")


def idempotency_key(workflow_id: str, activity_type: str, logical_attempt: int) -> str:
    """The unambiguous key of one logical attempt of ``activity_type`` in a workflow."""
    if isinstance(logical_attempt, bool) or not isinstance(logical_attempt, int):
        raise TypeError(f"logical_attempt must be an int, got {type(logical_attempt).__name__}")
    if logical_attempt < 0:
        raise ValueError(f"logical_attempt must be >= 0, got {logical_attempt}")
    return f"{_escape(workflow_id)}{_SEP}{_escape(activity_type)}{_SEP}{logical_attempt}"


def parse_idempotency_key(key: str) -> tuple[str, str, int]:
    """Inverse of :func:`idempotency_key`; raises ``ValueError`` for anything it did not make."""
    parts = key.split(_SEP)
    if len(parts) != 3:
        raise ValueError(f"not an idempotency key (expected 3 parts): {key!r}")
    wf, activity_type, attempt = parts
    if not attempt.isdigit() or not attempt.isascii() or (len(attempt) > 1 and attempt[0] == "0"):
        raise ValueError(f"not an idempotency key (bad logical attempt {attempt!r}): {key!r}")
    triple = (
        unquote(wf, encoding="utf-8", errors="surrogatepass"),
        unquote(activity_type, encoding="utf-8", errors="surrogatepass"),
        int(attempt),
    )
    if idempotency_key(*triple) != key:  # e.g. '%41' where 'A' was expected: not canonical
        raise ValueError(f"not a canonical idempotency key: {key!r}")
    return triple
