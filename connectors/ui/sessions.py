"""Who is signed in to the web UI: server-side sessions and their CSRF tokens.

A session is created only by a sign-in with an actor's bearer token, checked by
:meth:`connectors.auth.Actors.authenticate` (sha256, constant time, only hashes stored). The
browser holds a random session id in an ``HttpOnly``, ``SameSite=Strict`` cookie; this
process stores the session under the sha256 of that id (a dump of the store gives no
cookie away) with its expiry. Every POST form carries the session's CSRF token, compared
with ``hmac.compare_digest``. The store is in memory: a restarted connector signs everyone
out, which a bearer token undoes in one step.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from enum import StrEnum

from connectors.auth import Actor
from orchestrator.records.clock import SYSTEM_CLOCK, Clock

__all__ = ["COOKIE", "PRE_COOKIE", "FlashLevel", "Session", "SessionStore", "same_token"]

#: The session cookie's name.
COOKIE = "keel_ui_session"
#: The sign-in form's own cookie (a double-submitted CSRF token before any session).
PRE_COOKIE = "keel_ui_signin"
#: How long a session lasts from its sign-in.
SESSION_TTL_S = 8 * 3600
#: Sessions one actor keeps at most: a new sign-in beyond it ends that actor's oldest. The
#: cap is per actor, so however often one actor signs in, no other actor is signed out; the
#: store holds at most this many per configured actor.
MAX_SESSIONS_PER_ACTOR = 32


class FlashLevel(StrEnum):
    """How a one-time message after an action is shown."""

    OK = "ok"
    REFUSED = "refused"


@dataclass
class Session:
    actor: Actor
    csrf: str
    expires_at: float
    #: Messages shown once, on the next page (the answer of a POST, after its redirect).
    flashes: list[tuple[FlashLevel, str]] = field(default_factory=list)

    def flash(self, level: FlashLevel, text: str) -> None:
        self.flashes.append((level, text))

    def take_flashes(self) -> list[tuple[FlashLevel, str]]:
        out, self.flashes = self.flashes, []
        return out


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def same_token(presented: str | None, expected: str) -> bool:
    """Whether a form's CSRF token is the expected one, in constant time."""
    if not presented or len(presented) > 256:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


class SessionStore:
    """Sessions by the sha256 of their id, each with its expiry, at most
    ``MAX_SESSIONS_PER_ACTOR`` per actor."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, clock: Clock = SYSTEM_CLOCK) -> None:
        self.ttl_s = ttl_s
        #: Decides expiry: a test's manual clock ends a session without waiting for it.
        self.clock = clock
        self._sessions: dict[str, Session] = {}
        #: Each actor's session keys, oldest first (a dict as an ordered set).
        self._by_actor: dict[str, dict[str, None]] = {}

    def create(self, actor: Actor) -> tuple[str, Session]:
        """A new session for ``actor``: ``(session id for the cookie, session)``; the actor's
        oldest session ends if it has ``MAX_SESSIONS_PER_ACTOR`` already."""
        self._purge()
        mine = list(self._by_actor.get(actor.name, ()))
        for oldest in mine[: max(0, len(mine) - MAX_SESSIONS_PER_ACTOR + 1)]:
            self._drop(oldest)
        session_id = secrets.token_urlsafe(32)
        session = Session(actor, secrets.token_urlsafe(32), self._now() + self.ttl_s)
        key = _key(session_id)
        self._sessions[key] = session
        self._by_actor.setdefault(actor.name, {})[key] = None
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of a cookie's id, or None (unknown, expired or malformed)."""
        if not session_id or len(session_id) > 256:
            return None
        key = _key(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires_at <= self._now():
            self._drop(key)
            return None
        return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            self._drop(_key(session_id))

    def _drop(self, key: str) -> None:
        session = self._sessions.pop(key, None)
        if session is None:
            return
        mine = self._by_actor.get(session.actor.name, {})
        mine.pop(key, None)
        if not mine:
            self._by_actor.pop(session.actor.name, None)

    def _now(self) -> float:
        return self.clock.now_ms() / 1000

    def _purge(self) -> None:
        now = self._now()
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            self._drop(key)
