"""What a running activity handler can know and do: its identity and heartbeats.

Handlers are plain functions of their input; the worker sets this context around each
call, so a handler that needs its idempotency key (to pass to an external system) or
must heartbeat (a long call) asks for ``activity()``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ActivityContext:
    workflow_id: str
    activity_id: str
    activity_type: str
    attempt: int
    logical_attempt: int
    idempotency_key: str
    heartbeat_ms: int
    _send: Callable[[str], None] = field(repr=False)
    _last_beat: float = field(default=0.0, repr=False)
    #: The process's clock (``Clock.monotonic``): a test's manual clock spaces heartbeats too.
    _monotonic: Callable[[], float] = field(default=time.monotonic, repr=False)
    #: What the process's composition root gives its attempts, by type (the LLM runtime of
    #: LLM steps, handlers/llm/runtime.py): no handler reaches a process-wide object.
    services: Mapping[type, object] = field(default_factory=dict, repr=False)

    def heartbeat(self, details: Any = None, force: bool = False) -> None:
        """Report progress; sent at most every third of the heartbeat timeout."""
        now = self._monotonic()
        spacing = self.heartbeat_ms / 3000 if self.heartbeat_ms else 1.0
        if force or now - self._last_beat >= spacing:
            self._last_beat = now
            self._send(json.dumps(details))


_current: ContextVar[ActivityContext | None] = ContextVar("keel_activity", default=None)


def activity() -> ActivityContext:
    """The context of the activity being run; raises outside a handler."""
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("activity() is only available inside an activity handler")
    return ctx


def set_current(ctx: ActivityContext | None) -> object:
    return _current.set(ctx)


def reset_current(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
