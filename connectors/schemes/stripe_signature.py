"""The ``stripe`` scheme (Stripe's "Verify webhook signatures", docs/connector.md).

``Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=...]``: each ``v1`` the HMAC-SHA256 of
``{t}.{body}`` under the endpoint's secret (``whsec_...``, used as text), ``t`` within the
tolerance (300 s, Stripe's default). Keel's own header is signed the same way, so
:func:`connectors.signing.verify` checks it. The event id dedupe uses is the body's
``id`` (``evt_...``, repeated by every retry), the type the body's ``type``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from connectors import signing
from connectors.schemes.verdict import Verified, body_field
from connectors.webhooks import parse_body

__all__ = ["SIGNATURE_HEADER", "verify"]

SIGNATURE_HEADER = "Stripe-Signature"


def verify(
    headers: Mapping[str, str], body: bytes, keys: Sequence[bytes], tolerance_s: float, now: float
) -> Verified:
    """The event when some ``v1`` matches under some secret within the window."""
    header = headers.get(SIGNATURE_HEADER.lower())
    signing.verify(header, body, keys, tolerance_s, now, name=SIGNATURE_HEADER)
    parsed = parse_body(body)
    kind = body_field(parsed, "type", "Stripe")
    return Verified(
        body_field(parsed, "id", "Stripe"), kind if isinstance(kind, str) else "", parsed
    )
