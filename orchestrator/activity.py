"""What an activity handler is written with: ``context()`` (the running attempt: its
idempotency key, workflow id, attempt, heartbeat), ``@side_effect``, the failure classes
a handler raises (transient, permanent, outcome unknown), ``RateLimit`` for
``@app.activity`` and ``Sensitive`` fields sealed outside their handler
(docs/activities.md).

Like ``temporalio.activity``: ``from orchestrator import activity`` then
``activity.context()``. Names load on first use from the table in
``orchestrator.application.public_face``; imports no I/O client.
"""

from __future__ import annotations

import sys as _sys
import types as _types
import typing as _typing
import warnings as _warnings

from orchestrator.application.public_face import load as _load
from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("activity", globals())


class _CallableModule(_types.ModuleType):
    """``activity()`` as it was before the role modules (a function of ``orchestrator``):
    kept so applications written against it run; it warns."""

    def __call__(self) -> _typing.Any:
        _warnings.warn(
            "orchestrator.activity() is deprecated: use orchestrator.activity.context()",
            DeprecationWarning,
            stacklevel=2,
        )
        return _load("activity", "context", vars(self))()


_sys.modules[__name__].__class__ = _CallableModule


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from handlers.sdk.activity_context import ActivityContext as ActivityContext
    from handlers.sdk.activity_context import activity as _activity
    from handlers.sdk.activity_errors import ActivityError as ActivityError
    from handlers.sdk.activity_errors import OutcomeUnknownError as OutcomeUnknownError
    from handlers.sdk.activity_errors import PermanentError as PermanentError
    from handlers.sdk.activity_errors import TransientError as TransientError
    from handlers.sdk.markers import side_effect as side_effect
    from orchestrator.application.activity_limits import RateLimit as RateLimit
    from orchestrator.trust.sealing import SealedValue as SealedValue
    from orchestrator.trust.sealing import Sensitive as Sensitive

    context = _activity
