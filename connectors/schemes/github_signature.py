"""The ``github`` scheme (GitHub's "Validating webhook deliveries", docs/connector.md).

``X-Hub-Signature-256: sha256=<hex>`` is the HMAC-SHA256 of the raw body under the
webhook's secret. ``X-GitHub-Delivery`` (a GUID, repeated by a redelivery) is the event id
dedupe uses; ``X-GitHub-Event`` the event type. GitHub signs no timestamp, so a replay is
stopped by the delivery id alone. The ``ping`` GitHub sends when a hook is created is
answered ``{"status": "pong"}`` and goes nowhere. Deliveries must be
``application/json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from connectors.schemes.verdict import Verified, any_match, hmac_sha256, required_header
from connectors.signing import SignatureError
from connectors.webhooks import parse_body
from orchestrator.application.webhook_sources import RouteError

__all__ = ["DELIVERY_HEADER", "EVENT_HEADER", "PING", "SIGNATURE_HEADER", "verify"]

SIGNATURE_HEADER = "X-Hub-Signature-256"
DELIVERY_HEADER = "X-GitHub-Delivery"
EVENT_HEADER = "X-GitHub-Event"
#: The event GitHub sends to a new hook.
PING = "ping"

_SIGNATURE_RE = re.compile(r"sha256=([0-9a-fA-F]{64})")


def verify(
    headers: Mapping[str, str], body: bytes, keys: Sequence[bytes], tolerance_s: float, now: float
) -> Verified:
    """The delivery when its signature matches under some secret (no time window)."""
    found = _SIGNATURE_RE.fullmatch(required_header(headers, SIGNATURE_HEADER))
    if found is None:
        raise SignatureError(f"{SIGNATURE_HEADER} must be sha256=<64 hex digits>")
    given = found.group(1).lower().encode("ascii")
    if not any_match((hmac_sha256(key, body).hex().encode("ascii") for key in keys), [given]):
        raise SignatureError(f"{SIGNATURE_HEADER} does not match the body under any active secret")
    delivery = _header(headers, DELIVERY_HEADER)
    event = _header(headers, EVENT_HEADER)
    parsed = parse_body(body)
    reply = {"status": "pong"} if event == PING else None
    return Verified(delivery, event, parsed, reply)


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name.lower(), "").strip()
    if not value:
        raise RouteError(f"missing {name} header")
    return value
