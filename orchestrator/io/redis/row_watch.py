"""A client's subscription to the changes of one workflow's read-model row.

A live projector announces each change of a row's status (its creation included) on the
row's pub/sub channel, in the same atomic step as the write
(:meth:`~orchestrator.io.redis.read_model.Projection.write_guarded`). ``KeelClient.start``
and ``KeelClient.wait`` subscribe *before* they look at the row, so a change made after
that look is always announced to them: they read the row once more on each announcement
instead of polling it every few milliseconds. Pub/sub is not durable (a dropped
connection, a rebuild, which does not announce, or a projector of an older version), so
the callers still read the row now and then: the announcement only makes them faster
(git show 6f66b40:docs/performance.md, "The result pushed to the client").

One subscription at a time per client, kept from a start to the ``wait`` that follows
it and until the next row is watched; announcements of an earlier workflow still in
flight are ignored by channel.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

from redis.client import PubSub

from orchestrator.io.redis.client_factory import REDIS_ERRORS
from orchestrator.io.redis.read_model import Projection

__all__ = ["RowWatch"]

log = logging.getLogger("keel.client")


class RowWatch:
    """Subscribe to one workflow's row changes and wait for the next one."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection
        self._pubsub: PubSub | None = None
        self._channel: str | None = None
        self._confirmed = False
        #: Set after a Redis error: the owner falls back to reading the row.
        self.broken = False

    def watching(self, workflow_id: str) -> bool:
        """Subscribed (and confirmed) to ``workflow_id``'s changes."""
        return (
            self._confirmed
            and not self.broken
            and self._channel == self.projection.changes_channel(workflow_id)
        )

    def begin(self, workflow_id: str) -> bool:
        """Ask for ``workflow_id``'s changes (does not wait for the answer: :meth:`confirm`).

        After a Redis error each new watch tries again on a new connection.
        """
        self.broken = False
        channel = self.projection.changes_channel(workflow_id)
        if self._channel == channel:
            return True
        try:
            if self._pubsub is None:
                self._pubsub = self.projection.r.pubsub()
            if self._channel is not None:
                self._pubsub.unsubscribe(self._channel)
            self._channel, self._confirmed = channel, False
            self._pubsub.subscribe(channel)
        except REDIS_ERRORS as exc:
            self._fail(exc)
        return not self.broken

    def confirm(self, timeout_s: float) -> bool:
        """Wait until the subscription is active: every change after this is announced."""
        deadline = time.monotonic() + timeout_s
        while not self._confirmed and not self.broken and self._channel is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._receive(remaining)
        return self._confirmed and not self.broken

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        """The next announcement for the watched row (``{}`` if unreadable), or None."""
        deadline = time.monotonic() + timeout_s
        while not self.broken and self._channel is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            found = self._receive(remaining)
            if found is not None:
                return found
        return None

    def end(self) -> None:
        """Done waiting. The subscription is kept (no Redis call): the next :meth:`begin`
        of another row drops it, one of the same row reuses it, :meth:`close` ends it;
        announcements on it meanwhile are read past by channel."""

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(*REDIS_ERRORS):
                self._pubsub.close()
        self._pubsub, self._channel, self._confirmed = None, None, False

    def _receive(self, timeout_s: float) -> dict[str, Any] | None:
        assert self._pubsub is not None
        try:
            msg = self._pubsub.get_message(timeout=timeout_s)
        except REDIS_ERRORS as exc:
            self._fail(exc)
            return None
        if msg is None or msg.get("channel") != self._channel:
            return None
        if msg["type"] == "subscribe":
            self._confirmed = True
            return None
        if msg["type"] != "message":
            return None
        try:
            note = json.loads(msg["data"])
        except (TypeError, ValueError):
            return {}
        return note if isinstance(note, dict) else {}

    def _fail(self, exc: Exception) -> None:
        log.debug("read-model announcements unavailable, reading the row instead: %s", exc)
        self.broken = True
        self.close()
        self.broken = True
