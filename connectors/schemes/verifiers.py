"""Which verifier checks a source's deliveries, and the keys it checks them with.

:func:`verify_delivery` is the connector's one entry (connectors/server/service.py): under
``keel`` it checks ``Keel-Signature`` (connectors/signing.py) and asks the source's
``event_id`` for the id; under a provider's scheme the provider's verifier names it.
Either way the id is checked against the event-id rule (docs/connector.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from connectors import signing
from connectors.schemes import (
    github_signature,
    slack_signature,
    standard_signature,
    stripe_signature,
)
from connectors.schemes.verdict import Verified
from connectors.webhooks import parse_body
from orchestrator.application.webhook_sources import SignatureScheme, WebhookSource, check_event_id
from orchestrator.domain.model.errors import ConfigError

__all__ = ["keys_of", "verify_delivery"]

Verifier = Callable[[Mapping[str, str], bytes, Sequence[bytes], float, float], Verified]

_VERIFIERS: dict[SignatureScheme, Verifier] = {
    SignatureScheme.STANDARD_WEBHOOKS: standard_signature.verify,
    SignatureScheme.GITHUB: github_signature.verify,
    SignatureScheme.STRIPE: stripe_signature.verify,
    SignatureScheme.SLACK: slack_signature.verify,
}


def keys_of(source: WebhookSource, value: str | None) -> list[bytes]:
    """The HMAC keys of the secrets in ``value`` (comma-separated, several during a
    rotation); ConfigError naming the variable, never the secret."""
    secrets = signing.parse_secrets(value)
    if not secrets:
        raise ConfigError(
            f"webhook source '{source.name}' needs its secrets in {source.secret_env} "
            "(comma-separated), which is unset or empty"
        )
    if source.scheme is not SignatureScheme.STANDARD_WEBHOOKS:
        return secrets
    keys = []
    for position, secret in enumerate(secrets, 1):
        try:
            keys.append(standard_signature.key_of(secret))
        except ValueError:
            raise ConfigError(
                f"webhook source '{source.name}': secret {position} in {source.secret_env} "
                f"is not {standard_signature.SECRET_PREFIX}<base64> (a Standard Webhooks secret)"
            ) from None
    return keys


def verify_delivery(
    source: WebhookSource,
    keys: Sequence[bytes],
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
) -> Verified:
    """The verified delivery; SignatureError (401) or RouteError (400) with the reason."""
    lowered: dict[str, str] = {}
    for name, value in headers.items():
        lowered.setdefault(name.lower(), value)  # the first of a repeated header
    clock = time.time() if now is None else now
    if source.scheme is SignatureScheme.KEEL:
        header = lowered.get(signing.SIGNATURE_HEADER.lower())
        signing.verify(header, body, keys, source.tolerance_s, clock)
        parsed = parse_body(body)
        return Verified(source.event_id_of(parsed), "", parsed)
    verified = _VERIFIERS[source.scheme](lowered, body, keys, source.tolerance_s, clock)
    if verified.reply is None:
        check_event_id(source.name, verified.event_id)
    return verified
