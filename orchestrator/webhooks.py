"""What a webhook source is declared with (``app.webhook``, docs/connector.md): the
actions a route returns, ``WebhookSignal`` to a workflow or ``WebhookStart`` of one, the
verified ``WebhookEvent`` a provider's scheme hands it, the ``SignatureScheme`` and the
``RouteError`` a route raises to answer 400.

Names load on first use from the table in ``orchestrator.application.public_face``; imports no I/O
client (the connector serves the sources).
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("webhooks", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from orchestrator.application.webhook_sources import RouteError as RouteError
    from orchestrator.application.webhook_sources import SignatureScheme as SignatureScheme
    from orchestrator.application.webhook_sources import WebhookEvent as WebhookEvent
    from orchestrator.application.webhook_sources import WebhookSignal as WebhookSignal
    from orchestrator.application.webhook_sources import WebhookSource as WebhookSource
    from orchestrator.application.webhook_sources import WebhookStart as WebhookStart
