"""Webhook deliveries in the test environment, taken as the connector takes them.

The same steps as ``connectors/server/service.py`` (docs/connector.md), on the same code: the
signature is verified under the source's scheme (``connectors.schemes.verifiers``), the
delivery routed by the source's ``route`` into a checked command (``WebhookSource.command_of``),
a signal to a run that cannot take it answered at once (``connectors.webhooks.signal_refusal``),
and the command sent under the message id the connector gives it (one per source and
event id). Only the dedupe marker differs: the connector keeps it in Redis, the kit in a
set; either way a repeated event id is a duplicate and nothing is sent again.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connectors.schemes.verifiers import keys_of, verify_delivery
from connectors.signing import SIGNATURE_HEADER, SignatureError, signature_header
from connectors.webhooks import message_id, signal_refusal
from orchestrator.application.webhook_sources import (
    SignatureScheme,
    WebhookEvent,
    WebhookSource,
)
from orchestrator.domain.model.errors import InvalidInputError, NotFoundError
from orchestrator.domain.model.messages import SignalWorkflow
from orchestrator.testing.run_handles import RunDriver

__all__ = ["WebhookDesk", "WebhookReceipt"]


@dataclass(frozen=True)
class WebhookReceipt:
    """The connector's answer: ``status`` (202 accepted, 200 duplicate or handshake, 400
    unreadable, 401 bad signature, 404 no such run yet, 409 run ended, 422 no such
    signal), the ``reason`` of a refusal, and what was sent."""

    status: int
    reason: str = ""
    event_id: str = ""
    workflow_id: str = ""
    message_id: str = ""

    @property
    def accepted(self) -> bool:
        return self.status == 202


class WebhookDesk:
    """The webhook ingress of one environment: secrets per source, delivered event ids."""

    def __init__(self, env: RunDriver, secrets_by_source: dict[str, str]) -> None:
        self.env = env
        self._secrets = secrets_by_source
        self._delivered: set[tuple[str, str]] = set()

    def source(self, name: str) -> WebhookSource:
        found = self.env.app.webhooks.get(name)
        if found is None:
            known = ", ".join(sorted(self.env.app.webhooks)) or "none"
            raise NotFoundError(f"the application has no webhook source '{name}' (known: {known})")
        return found

    def secret(self, source: WebhookSource) -> str:
        """The source's secrets as its variable would hold them: given to the environment,
        else the variable itself, else one made up for this environment."""
        if source.name not in self._secrets:
            from_env = os.environ.get(source.secret_env)
            if source.scheme is SignatureScheme.STANDARD_WEBHOOKS and not from_env:
                raise InvalidInputError(
                    f"webhook source '{source.name}' (standard-webhooks) needs its whsec_ "
                    "secret: give it in webhook_secrets"
                )
            self._secrets[source.name] = from_env or secrets.token_hex(16)
        return self._secrets[source.name]

    def sign(self, name: str, body: bytes) -> dict[str, str]:
        source = self.source(name)
        if source.scheme is not SignatureScheme.KEEL:
            raise InvalidInputError(
                f"webhook source '{name}' is signed under the {source.scheme} scheme: sign the "
                "delivery with the provider's library and the secret given in webhook_secrets"
            )
        keys = keys_of(source, self.secret(source))
        timestamp = self.env.clock.now_ms() // 1000
        return {SIGNATURE_HEADER: signature_header(keys[:1], timestamp, body)}

    def deliver(
        self, name: str, body: bytes | Mapping[str, Any], headers: Mapping[str, str] | None
    ) -> WebhookReceipt:
        source = self.source(name)
        raw = body if isinstance(body, bytes) else json.dumps(dict(body)).encode()
        if headers is None:
            headers = self.sign(name, raw)
        keys = keys_of(source, self.secret(source))
        try:
            verified = verify_delivery(source, keys, headers, raw, self.env.clock.now_ms() / 1000)
        except SignatureError as exc:
            return WebhookReceipt(401, str(exc))
        except InvalidInputError as exc:
            return WebhookReceipt(400, str(exc))
        if verified.reply is not None:
            return WebhookReceipt(200, "handshake", verified.event_id)
        event_id = verified.event_id
        try:
            event = WebhookEvent(event_id, verified.event_type, verified.body)
            command = source.command_of(event, self.env.app)
        except InvalidInputError as exc:
            return WebhookReceipt(400, str(exc), event_id)
        wf, mid = command.workflow_id, message_id(source.name, event_id)
        if (source.name, event_id) in self._delivered:
            return WebhookReceipt(200, "duplicate", event_id, wf, mid)
        if isinstance(command.payload, SignalWorkflow):
            refusal = signal_refusal(self.env.app, wf, command.payload.signal_name, self._row(wf))
            if refusal is not None:
                return WebhookReceipt(refusal[0], refusal[1], event_id, wf, mid)
        self.env.send(wf, command.payload, mid)
        self._delivered.add((source.name, event_id))
        return WebhookReceipt(202, "", event_id, wf, mid)

    def _row(self, workflow_id: str) -> dict[str, Any] | None:
        state = self.env.state(workflow_id)
        if state is None:
            return None
        return {"status": str(state.status), "name": state.name, "version": state.version}
