"""Webhook signatures: HMAC-SHA256 over ``timestamp + "." + body``, as Stripe signs its events.

A sender puts one header on every delivery (docs/connector.md)::

    Keel-Signature: t=1767225600,v1=5257a869...,v1=9e1c0d3b...

``t`` is the Unix time the sender signed at; each ``v1`` is the lowercase hex HMAC-SHA256
of ``f"{t}.".encode() + body`` under one secret. Several ``v1`` values and several active
secrets on the receiving side make a secret rotation seamless: sign with old and new while
the receiver holds both, then retire the old. The timestamp is inside the signed bytes, so
a captured delivery cannot be replayed outside the tolerance window. Comparisons use
:func:`hmac.compare_digest`. Secrets never appear in an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Sequence
from enum import StrEnum

from orchestrator.application.webhook_sources import DEFAULT_TOLERANCE_S
from orchestrator.domain.model.errors import KeelError

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "SIGNATURE_HEADER",
    "Scheme",
    "SignatureError",
    "parse_secrets",
    "parse_signature_header",
    "sign",
    "signature_header",
    "verify",
]

#: The request header that carries the timestamp and the signatures.
SIGNATURE_HEADER = "Keel-Signature"
#: A header longer than this is refused before it is parsed.
MAX_HEADER_CHARS = 4096
#: At most this many signatures in one header (a sender rotating holds two or three).
MAX_SIGNATURES = 8


class Scheme(StrEnum):
    """The keys of the signature header."""

    TIMESTAMP = "t"
    V1 = "v1"  # HMAC-SHA256, lowercase hex


class SignatureError(KeelError):
    """A delivery's signature is missing, malformed, wrong or outside the time window."""


def parse_secrets(value: str | None) -> list[bytes]:
    """The active secrets held in one variable: comma-separated, blanks ignored."""
    return [s.strip().encode("utf-8") for s in (value or "").split(",") if s.strip()]


def sign(secret: bytes | str, timestamp: int, body: bytes) -> str:
    """The ``v1`` signature (hex) of ``body`` signed at ``timestamp`` under ``secret``."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return hmac.new(key, f"{timestamp}.".encode("ascii") + body, hashlib.sha256).hexdigest()


def signature_header(secrets: Iterable[bytes | str], timestamp: int, body: bytes) -> str:
    """The ``Keel-Signature`` value a sender puts on ``body``: one ``v1`` per secret."""
    sigs = ",".join(f"{Scheme.V1}={sign(s, timestamp, body)}" for s in secrets)
    return f"{Scheme.TIMESTAMP}={timestamp},{sigs}"


def parse_signature_header(
    value: str | None, name: str = SIGNATURE_HEADER
) -> tuple[int, list[str]]:
    """``(timestamp, v1 signatures)`` of header ``name``; unknown schemes are ignored."""
    if not value:
        raise SignatureError(f"missing {name} header")
    if len(value) > MAX_HEADER_CHARS:
        raise SignatureError(f"{name} header is longer than {MAX_HEADER_CHARS} chars")
    timestamp: int | None = None
    signatures: list[str] = []
    for item in value.split(","):
        key, sep, val = item.strip().partition("=")
        if not sep:
            continue
        if key == Scheme.TIMESTAMP:
            val = val.strip()
            if not val.isascii() or not val.isdigit() or len(val) > 12:
                raise SignatureError(f"{name} timestamp must be Unix seconds (digits only)")
            timestamp = int(val)
        elif key == Scheme.V1:
            signatures.append(val.strip())
    if timestamp is None:
        raise SignatureError(f"{name} header has no t=<unix seconds>")
    if not signatures:
        raise SignatureError(f"{name} header has no v1=<hex signature>")
    if len(signatures) > MAX_SIGNATURES:
        raise SignatureError(f"{name} header has more than {MAX_SIGNATURES} signatures")
    return timestamp, signatures


def verify(
    header: str | None,
    body: bytes,
    secrets: Sequence[bytes],
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
    name: str = SIGNATURE_HEADER,
) -> int:
    """The signed timestamp when some ``v1`` matches some secret within the window.

    Raises :class:`SignatureError` with a one-line reason otherwise. The window is
    checked before the signatures, but the reason never says which secret was close.
    ``name`` is the header's name in the reasons (``Stripe-Signature`` signs the same way).
    """
    if not secrets:
        raise SignatureError("no secret is configured for this source")
    timestamp, given = parse_signature_header(header, name)
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_s:
        raise SignatureError(
            f"{name} timestamp is outside the tolerance window of "
            f"{tolerance_s:g} s (sign with the current time)"
        )
    candidates = [g.encode("utf-8", "replace") for g in given]
    matched = False
    for secret in secrets:
        expected = sign(secret, timestamp, body).encode("ascii")
        for candidate in candidates:
            # no early exit: the work done does not depend on which pair matched
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise SignatureError(f"{name} does not match the body under any active secret")
    return timestamp
