"""What the scheme verifiers share: their result and the checks every scheme makes.

A verifier returns :class:`Verified` or raises ``SignatureError`` (answered 401) or
``RouteError`` (400) with a one-line reason that names a header, never a secret.
Signatures are compared with :func:`hmac.compare_digest`, every candidate against every
active secret, with no early exit (docs/connector.md, "Signature schemes").
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from connectors.signing import SignatureError
from orchestrator.application.webhook_sources import RouteError

__all__ = [
    "MAX_SIGNATURE_HEADER_CHARS",
    "Verified",
    "any_match",
    "body_field",
    "hmac_sha256",
    "required_header",
    "within_window",
]

#: A signature header longer than this is refused before it is parsed.
MAX_SIGNATURE_HEADER_CHARS = 4096


@dataclass(frozen=True, slots=True)
class Verified:
    """A delivery whose signature matched: its event id (what dedupe keys on), its event
    type ("" when the provider names none) and its body; ``reply``, when set, is the whole
    answer to a provider's handshake (Slack's ``url_verification``), sent with 200 and
    nothing written to Redis or Kafka."""

    event_id: str
    event_type: str
    body: dict[str, Any]
    reply: dict[str, Any] | None = None


def required_header(headers: Mapping[str, str], name: str) -> str:
    """Header ``name`` (``headers`` keyed in lowercase); SignatureError when absent."""
    value = headers.get(name.lower(), "").strip()
    if not value:
        raise SignatureError(f"missing {name} header")
    if len(value) > MAX_SIGNATURE_HEADER_CHARS:
        raise SignatureError(f"{name} header is longer than {MAX_SIGNATURE_HEADER_CHARS} chars")
    return value


def within_window(headers: Mapping[str, str], name: str, tolerance_s: float, now: float) -> int:
    """The Unix seconds in header ``name``, when within ``tolerance_s`` of ``now``."""
    value = required_header(headers, name)
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        raise SignatureError(f"{name} must be Unix seconds (digits only)")
    timestamp = int(value)
    if abs(now - timestamp) > tolerance_s:
        raise SignatureError(
            f"{name} is outside the tolerance window of {tolerance_s:g} s "
            "(sign with the current time)"
        )
    return timestamp


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def any_match(expected: Iterable[bytes], given: Iterable[bytes]) -> bool:
    """Whether some given signature equals some expected one, in constant time per pair."""
    candidates = list(given)
    matched = False
    for want in expected:
        for candidate in candidates:
            # no early exit: the work done does not depend on which pair matched
            matched |= hmac.compare_digest(want, candidate)
    return matched


def body_field(body: dict[str, Any], name: str, scheme: str) -> Any:
    """Field ``name`` of a provider's body; RouteError naming it when absent."""
    if name not in body:
        raise RouteError(f"a {scheme} delivery's body has no '{name}' field")
    return body[name]
