"""Failure classes an activity handler raises, and how the worker maps the rest.

* ``TransientError`` — may heal on its own (timeout, connection reset, 429, 5xx):
  retried with backoff within the step's retry policy; ``retry_after_s`` (e.g. an HTTP
  ``Retry-After``) is reported, and the orchestrator retries no earlier than that.
* ``PermanentError`` — will fail the same way again (validation, schema, permission,
  business rule): never retried; the workflow takes its failure path.
* ``OutcomeUnknownError`` — a write whose effect may or may not have happened: the
  orchestrator must find out (status query) before anything is repeated.

Anything else a handler raises is classified by :func:`classify` (docs/activities.md
lists the rule): a bad shape (pydantic ``ValidationError``), input past a documented
limit, or a programming error (``TypeError``, ``AttributeError``, ``NameError``: a bug
runs the same way on every retry) is permanent; every other exception is transient.
"""

from __future__ import annotations

import math

from pydantic import ValidationError

from orchestrator.application.app import UnknownActivityError
from orchestrator.domain.model.errors import InvalidInputError, KeelError
from orchestrator.domain.model.limits import MAX_DURATION_MS
from orchestrator.domain.model.vocabulary import FailureClass

#: Exceptions that mean a bug in the handler: a retry runs the same code the same way.
PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (TypeError, AttributeError, NameError)

#: Exceptions that mean the input or output has the wrong shape or size.
BAD_SHAPE_ERRORS: tuple[type[BaseException], ...] = (
    ValidationError,
    InvalidInputError,
    UnknownActivityError,
)


class ActivityError(KeelError):
    """A failure an activity handler reports, with its class (Keel's one error root,
    ``KeelError``, above it: the worker classifies it, a CLI prints it in one line)."""

    failure_class: str = FailureClass.TRANSIENT


class TransientError(ActivityError):
    failure_class = FailureClass.TRANSIENT

    def __init__(self, message: str = "", retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentError(ActivityError):
    failure_class = FailureClass.PERMANENT


class OutcomeUnknownError(ActivityError):
    failure_class = FailureClass.UNKNOWN


class ResultRefusedError(PermanentError):
    """The handler returned, but its result could not be used (bad shape, over a limit).

    The handler ran to completion, so any write it made has happened: a side effect's
    claim is kept (recorded as refused) and never released for a second call.
    ``error_type`` names the original problem (e.g. ``ValidationError``).
    """

    def __init__(self, message: str, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def classify(exc: BaseException) -> FailureClass:
    """The failure class of an exception raised by (or around) a handler."""
    if isinstance(exc, ActivityError):
        return FailureClass(exc.failure_class)
    if isinstance(exc, BAD_SHAPE_ERRORS + PROGRAMMING_ERRORS):
        return FailureClass.PERMANENT
    return FailureClass.TRANSIENT


def error_type(exc: BaseException) -> str:
    """The ``error_type`` reported for ``exc`` (what a policy's ``non_retryable`` names)."""
    if isinstance(exc, ResultRefusedError):
        return exc.error_type
    return type(exc).__name__


def retry_after_ms(exc: BaseException) -> int:
    """The wait a transient failure asks for before the next attempt, in ms (0: none)."""
    if not isinstance(exc, TransientError) or not exc.retry_after_s:
        return 0
    seconds = exc.retry_after_s
    if seconds != seconds or seconds <= 0:  # NaN or nothing to wait
        return 0
    if seconds * 1000 >= MAX_DURATION_MS:
        return MAX_DURATION_MS
    return math.ceil(seconds * 1000)
