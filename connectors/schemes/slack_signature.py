"""The ``slack`` scheme (Slack's "Verifying requests from Slack", docs/connector.md).

``X-Slack-Signature: v0=<hex>`` is the HMAC-SHA256 of ``v0:{timestamp}:{body}`` under the
app's signing secret; ``X-Slack-Request-Timestamp`` must be within the tolerance (Slack
says 5 minutes). Events API deliveries (JSON) are read: the event id dedupe uses is the
body's ``event_id`` (repeated by Slack's retries), the type the inner ``event.type`` of an
``event_callback``. The ``url_verification`` handshake is answered at once with its
``challenge`` and goes nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from connectors.schemes.verdict import (
    Verified,
    any_match,
    body_field,
    hmac_sha256,
    required_header,
    within_window,
)
from connectors.signing import SignatureError
from connectors.webhooks import parse_body
from orchestrator.application.webhook_sources import RouteError

__all__ = ["EVENT_CALLBACK", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "URL_VERIFICATION", "verify"]

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
URL_VERIFICATION = "url_verification"
EVENT_CALLBACK = "event_callback"
#: The longest challenge echoed back.
MAX_CHALLENGE_CHARS = 512

_SIGNATURE_RE = re.compile(r"v0=([0-9a-fA-F]{64})")


def verify(
    headers: Mapping[str, str], body: bytes, keys: Sequence[bytes], tolerance_s: float, now: float
) -> Verified:
    """The event (or the handshake's reply) when the signature matches within the window."""
    within_window(headers, TIMESTAMP_HEADER, tolerance_s, now)
    timestamp = required_header(headers, TIMESTAMP_HEADER)
    found = _SIGNATURE_RE.fullmatch(required_header(headers, SIGNATURE_HEADER))
    if found is None:
        raise SignatureError(f"{SIGNATURE_HEADER} must be v0=<64 hex digits>")
    given = found.group(1).lower().encode("ascii")
    signed = f"v0:{timestamp}:".encode() + body
    if not any_match((hmac_sha256(key, signed).hex().encode("ascii") for key in keys), [given]):
        raise SignatureError(f"{SIGNATURE_HEADER} does not match the body under any active secret")
    parsed = parse_body(body)
    kind = body_field(parsed, "type", "Slack")
    if kind == URL_VERIFICATION:
        challenge = body_field(parsed, "challenge", "Slack")
        if not isinstance(challenge, str) or not 0 < len(challenge) <= MAX_CHALLENGE_CHARS:
            raise RouteError(f"a Slack challenge must be text of 1-{MAX_CHALLENGE_CHARS} chars")
        return Verified("", URL_VERIFICATION, parsed, {"challenge": challenge})
    event_id = body_field(parsed, "event_id", "Slack")
    inner = parsed.get("event")
    if kind == EVENT_CALLBACK and isinstance(inner, dict) and isinstance(inner.get("type"), str):
        kind = inner["type"]
    return Verified(event_id, kind if isinstance(kind, str) else "", parsed)
