"""One signature verifier per :class:`~orchestrator.application.webhook_sources.SignatureScheme`
(docs/connector.md, "Signature schemes").

``verifiers.py`` picks the scheme's verifier and reads its keys; each verifier checks the
signature over the raw body (constant-time, under every active secret) and returns a
:class:`~connectors.schemes.verdict.Verified`: the event id dedupe uses, the event type and
the parsed body, or a handshake's reply. A refusal is a ``SignatureError`` (401) or a
``RouteError`` (400) with its one-line reason; no secret ever appears in it.

May import: ``connectors.signing`` and ``connectors.webhooks`` (the keel scheme and the
body rule), the authoring layer (``orchestrator.application.webhook_sources``) and the
domain; no I/O client, no other process.
"""
