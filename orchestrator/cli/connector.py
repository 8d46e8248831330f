"""``keel connector``: the webhook service (connectors/server/service.py, docs/connector.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.app_spec import AppOption, app_from


def connector(
    app: AppOption = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; loopback unless you put a proxy in front.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8700,
    ack_timeout: Annotated[
        float,
        typer.Option(min=1.0, max=120.0, help="Seconds to wait for Kafka's ack before a 503."),
    ] = 10.0,
) -> None:
    """Run the connector: signed webhooks in, commands to Kafka (GET /healthz, POST /webhooks/S)."""
    import asyncio

    from connectors.server.service import serve
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import KeelError
    from orchestrator.embedding.service_parts import ServiceParts
    from orchestrator.telemetry.gc_policy import configure_gc
    from orchestrator.telemetry.logs import configure_logging
    from orchestrator.telemetry.tracing import configure_tracing

    configure_logging()
    configure_tracing("keel-connector")
    settings = load_settings()
    configure_gc(settings)
    # the one clock, codec and hooks of this process; the sources' secrets from the settings
    service = ServiceParts.build(app_from(app), settings).connector(ack_timeout_s=ack_timeout)
    try:
        asyncio.run(serve(service, host, port))
    except OSError as exc:
        raise KeelError(f"the connector cannot listen on {host}:{port}: {exc.strerror}") from None
