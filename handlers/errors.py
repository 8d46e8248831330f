"""Failure classes an activity handler raises, and how the worker maps the rest.

* ``TransientError`` — may heal on its own (timeout, connection reset, 429, 5xx):
  retried with backoff within the step's retry policy.
* ``PermanentError`` — will fail the same way again (validation, schema, permission,
  business rule): never retried; the workflow takes its failure path.
* ``OutcomeUnknownError`` — a write whose effect may or may not have happened: the
  orchestrator must find out (status query) before anything is repeated.

Anything else a handler raises counts as transient, except pydantic's
``ValidationError`` (bad input or output shape), which is permanent.
"""

from __future__ import annotations

from pydantic import ValidationError

from orchestrator.app import UnknownActivityError


class ActivityError(Exception):
    failure_class = "transient"


class TransientError(ActivityError):
    failure_class = "transient"


class PermanentError(ActivityError):
    failure_class = "permanent"


class OutcomeUnknownError(ActivityError):
    failure_class = "unknown"


def classify(exc: BaseException) -> str:
    """The failure class of an exception raised by a handler."""
    if isinstance(exc, ActivityError):
        return exc.failure_class
    if isinstance(exc, ValidationError | TypeError | UnknownActivityError):
        return "permanent"
    return "transient"
