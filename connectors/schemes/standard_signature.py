"""The ``standard-webhooks`` scheme (https://www.standardwebhooks.com, docs/connector.md).

Three headers: ``webhook-id`` (the event id dedupe uses), ``webhook-timestamp`` (Unix
seconds, within the tolerance, 5 minutes by default as the spec recommends) and
``webhook-signature``: space-separated ``v1,<base64>`` entries, each the HMAC-SHA256 of
``{id}.{timestamp}.{body}``. The key is the secret ``whsec_<base64>`` decoded.
The event type is the body's ``type`` when it is text (the spec's payload shape).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence

from connectors.schemes.verdict import (
    Verified,
    any_match,
    hmac_sha256,
    required_header,
    within_window,
)
from connectors.signing import SignatureError
from connectors.webhooks import parse_body

__all__ = ["ID_HEADER", "SECRET_PREFIX", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "key_of", "verify"]

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
#: How a Standard Webhooks secret starts; the rest is its key in base64.
SECRET_PREFIX = "whsec_"
#: At most this many signatures in one header.
MAX_SIGNATURES = 8


def key_of(secret: bytes) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret (the prefix is optional); ValueError."""
    text = secret.removeprefix(SECRET_PREFIX.encode())
    try:
        key = base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise ValueError("not whsec_<base64>") from None
    if not key:
        raise ValueError("empty")
    return key


def verify(
    headers: Mapping[str, str], body: bytes, keys: Sequence[bytes], tolerance_s: float, now: float
) -> Verified:
    """The delivery when a ``v1`` signature matches under some key within the window."""
    msg_id = required_header(headers, ID_HEADER)
    within_window(headers, TIMESTAMP_HEADER, tolerance_s, now)
    timestamp = required_header(headers, TIMESTAMP_HEADER)
    given: list[bytes] = []
    for entry in required_header(headers, SIGNATURE_HEADER).split(" "):
        version, sep, signature = entry.partition(",")
        if version != "v1" or not sep:
            continue  # another version, or the spec's separator doubled
        try:
            given.append(base64.b64decode(signature, validate=True))
        except binascii.Error:
            raise SignatureError(
                f"{SIGNATURE_HEADER} holds a v1 signature that is not base64"
            ) from None
    if not given:
        raise SignatureError(f"{SIGNATURE_HEADER} has no v1,<base64 signature>")
    if len(given) > MAX_SIGNATURES:
        raise SignatureError(f"{SIGNATURE_HEADER} has more than {MAX_SIGNATURES} signatures")
    signed = f"{msg_id}.{timestamp}.".encode() + body
    if not any_match((hmac_sha256(key, signed) for key in keys), given):
        raise SignatureError(f"{SIGNATURE_HEADER} does not match the body under any active secret")
    parsed = parse_body(body)
    kind = parsed.get("type")
    return Verified(msg_id, kind if isinstance(kind, str) else "", parsed)
