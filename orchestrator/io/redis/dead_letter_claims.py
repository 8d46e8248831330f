"""The claims that close a dead letter at most once, in Redis: one key per letter
(``Keyspace.redriven``), taken with ``SET NX`` by a redrive or a discard
(orchestrator/client/dead_letters.py).
"""

from __future__ import annotations

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.io.redis.client_factory import REDIS_ERRORS, RedisUse, redis_client
from orchestrator.io.redis.keyspace import Keyspace

__all__ = ["ClaimsUnavailable", "LetterClaims"]


class ClaimsUnavailable(UnavailableError):
    """Redis did not answer; the message names the client's error class."""


class LetterClaims:
    def __init__(self, settings: Settings) -> None:
        self.keys = Keyspace.for_url(settings.topic_prefix, settings.redis)
        self.r = redis_client(settings.redis, RedisUse.OPERATOR)

    def read(self, letter_ids: list[str]) -> dict[str, str]:
        """The claims held on ``letter_ids`` (letter id -> the claim's text)."""
        if not letter_ids:
            return {}
        try:  # one GET each: in a cluster the claims are spread over every slot
            pipe = self.r.pipeline(transaction=False)
            for i in letter_ids:
                pipe.get(self.keys.redriven(i))
            values = pipe.execute()
        except REDIS_ERRORS as exc:
            raise ClaimsUnavailable(type(exc).__name__) from None
        return {i: str(v) for i, v in zip(letter_ids, values, strict=True) if v is not None}

    def take(self, letter_id: str, claim: str) -> str | None:
        """Take the claim of ``letter_id``: None when taken, else the claim that holds it."""
        key = self.keys.redriven(letter_id)
        try:
            if self.r.set(key, claim, nx=True):
                return None
            return str(self.r.get(key))
        except REDIS_ERRORS as exc:
            raise ClaimsUnavailable(type(exc).__name__) from None

    def take_each(self, letter_ids: list[str], claim: str) -> list[str]:
        """The ids of ``letter_ids`` whose claim this call took (others hold the rest)."""
        try:
            return [i for i in letter_ids if self.r.set(self.keys.redriven(i), claim, nx=True)]
        except REDIS_ERRORS as exc:
            raise ClaimsUnavailable(type(exc).__name__) from None

    def give_back(self, letter_ids: list[str]) -> None:
        """Release claims whose closing wrote nothing."""
        if letter_ids:
            self.r.delete(*(self.keys.redriven(i) for i in letter_ids))
