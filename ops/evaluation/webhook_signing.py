"""Signing a delivery as a webhook sender would, under each of the connector's schemes
(docs/connector.md, "Signature schemes"): what ``keel evaluate``'s driver posts to the
connector, so a run waiting for a webhook is answered through the real signed path.

A secret per source is made for each batch (``secret_for``), passed to the connector in
the source's ``secret_env``; the headers are the ones the connector's verifiers read
(``connectors/schemes/``), which tests/unit/ops/test_evaluation_driver.py checks against.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

from connectors.signing import signature_header
from orchestrator.application.webhook_sources import SignatureScheme

__all__ = ["secret_for", "signed_headers"]


def secret_for(scheme: SignatureScheme) -> str:
    """A fresh secret in the form ``scheme``'s senders use (Standard Webhooks: ``whsec_``)."""
    if scheme is SignatureScheme.STANDARD_WEBHOOKS:
        return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    return secrets.token_hex(24)


def _hex(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def signed_headers(
    scheme: SignatureScheme,
    secret: str,
    body: bytes,
    event_id: str,
    event_type: str = "",
    now: float | None = None,
) -> dict[str, str]:
    """The headers of ``body`` signed under ``secret`` by ``scheme``'s rules; ``event_id``
    and ``event_type`` go in headers where the scheme carries them there."""
    ts = int(time.time() if now is None else now)
    key = secret.encode()
    headers = {"Content-Type": "application/json"}
    match scheme:
        case SignatureScheme.KEEL:
            headers["Keel-Signature"] = signature_header([secret], ts, body)
        case SignatureScheme.STRIPE:
            headers["Stripe-Signature"] = f"t={ts},v1={_hex(key, f'{ts}.'.encode() + body)}"
        case SignatureScheme.GITHUB:
            headers["X-Hub-Signature-256"] = f"sha256={_hex(key, body)}"
            headers["X-GitHub-Delivery"] = event_id
            headers["X-GitHub-Event"] = event_type or "keel_evaluate"
        case SignatureScheme.SLACK:
            headers["X-Slack-Request-Timestamp"] = str(ts)
            headers["X-Slack-Signature"] = f"v0={_hex(key, f'v0:{ts}:'.encode() + body)}"
        case SignatureScheme.STANDARD_WEBHOOKS:
            raw = secret.removeprefix("whsec_")
            signing_key = base64.b64decode(raw + "=" * (-len(raw) % 4))
            signed = f"{event_id}.{ts}.".encode() + body
            mac = base64.b64encode(hmac.new(signing_key, signed, hashlib.sha256).digest())
            headers["webhook-id"] = event_id
            headers["webhook-timestamp"] = str(ts)
            headers["webhook-signature"] = f"v1,{mac.decode()}"
    return headers
