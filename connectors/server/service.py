"""``keel connector``: the aiohttp service that turns signed webhooks into Keel commands,
and serves the human-task inbox and decisions (connectors/human_task_api.py).

``POST /webhooks/{source}`` runs these steps, in this order (docs/connector.md):

1. the source is declared (else 404); the body fits the size limit (else 413) and arrives
   within the read timeout (else 408);
2. the signature matches under an active secret, in the time window, by the source's
   scheme (``Keel-Signature`` or a provider's, connectors/schemes/) (else 401);
3. the body is a JSON object the source can read and route (else 400, with the reason);
   a provider's handshake (Slack's ``url_verification``) is answered 200 here;
4. the event id is claimed in Redis: delivered before → 200 ``{"duplicate": true}``;
   another request is delivering it right now → wait for it, then 409 if still pending;
5. the command is produced with a message id derived from (source, event id), and the
   answer waits for Kafka's acknowledgement (else the claim is released and 503);
6. the event is marked delivered in Redis, and only then 202.

A crash before 5 completes leaves no record and a claim that expires, so the sender's
retry goes through; a crash between 5 and 6 leaves a record whose repeat the orchestrator
ignores by message id. So nothing is lost and nothing applies twice. ``GET /healthz``
reports whether Kafka and Redis answer (200 or 503). ``/tasks`` is connectors/human_task_api.py.
Every answer is JSON (connectors/json_answers.py); a client slower than the read timeout is
cut off (:func:`serve`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aiohttp import web

from connectors.auth import Actors
from connectors.delivery import AckingProducer, ClaimState, Dedupe
from connectors.human_task_api import TaskApi
from connectors.json_answers import error_answer, json_answer, json_errors, read_body
from connectors.schemes.verifiers import keys_of, verify_delivery
from connectors.signing import SignatureError
from connectors.ui import mount_ui
from connectors.webhooks import MAX_BODY_BYTES, message_id, signal_refusal
from orchestrator.application.app import KeelApp
from orchestrator.application.webhook_sources import WebhookEvent, WebhookSource
from orchestrator.client.client import KeelClient
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import (
    InvalidInputError,
    KeelError,
    UnavailableError,
)
from orchestrator.domain.model.messages import SignalWorkflow
from orchestrator.io.adapter_hooks import NO_HOOKS, AdapterHooks
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.io.redis.read_model import reachable
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.records.clock import SYSTEM_CLOCK, Clock
from orchestrator.records.envelopes import command_envelope
from orchestrator.telemetry import tracing
from orchestrator.telemetry.prometheus import exposition
from orchestrator.trust.human_task_tokens import tokens_for_app

__all__ = [
    "Connector",
    "Outcome",
    "create_app",
    "load_sources",
    "serve",
]

log = logging.getLogger("keel.connector")


class Outcome(StrEnum):
    """The ``status`` of a 2xx answer."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class LoadedSource:
    source: WebhookSource
    secrets: list[bytes]


def secret_variables(app: KeelApp) -> list[str]:
    """The variables that hold ``app``'s webhook sources' secrets, for the composition root."""
    return [source.secret_env for source in app.webhooks.values()]


def load_sources(app: KeelApp, secrets: Mapping[str, str]) -> dict[str, LoadedSource]:
    """Every declared source with its active secrets' keys; ConfigError names a missing
    variable or an unreadable secret (by position, never by value)."""
    return {
        name: LoadedSource(source, keys_of(source, secrets.get(source.secret_env)))
        for name, source in app.webhooks.items()
    }


class Connector:
    """The state of one connector process: its sources, producer and Redis."""

    def __init__(
        self,
        settings: Settings,
        app: KeelApp,
        *,
        secrets: Mapping[str, str],
        ack_timeout_s: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
        hooks: AdapterHooks = NO_HOOKS,
        codec: Codec | None = None,
    ) -> None:
        """``secrets``: the webhook sources' secret variables and their values, as the
        composition root read them (``Settings.named_secrets``); ``hooks``: what its producer
        is wrapped in when it opens (none in production; orchestrator/io/adapter_hooks.py)."""
        self.settings = settings
        self.hooks = hooks
        self.app = app
        #: Commands' recorded times, signature tolerances, dedupe markers, UI sessions.
        self.clock = clock
        self.sources = load_sources(app, secrets)
        self.ack_timeout_s = ack_timeout_s
        self.codec = codec or codec_for(settings)
        self.keyspace = Keyspace.for_url(settings.topic_prefix, settings.redis)
        self.producer: AckingProducer | None = None
        self.dedupe: Dedupe | None = None
        self._tracer = tracing.tracer()
        self.tasks = _task_api(settings, app, self.codec)

    async def open(self) -> None:
        self.producer = self.hooks.command_producer(
            AckingProducer(self.settings, self.ack_timeout_s)
        )
        # a claim outlives the longest wait for Kafka, so only a crashed holder loses it
        self.dedupe = Dedupe.connect(
            self.settings.redis,
            self.keyspace,
            lock_s=self.ack_timeout_s + 5,
            wait_s=self.ack_timeout_s,
            clock=self.clock,
        )

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.tasks.desk_client.close)
        if self.producer is not None:
            await loop.run_in_executor(None, self.producer.close)
        if self.dedupe is not None:
            await self.dedupe.aclose()

    # ------------------------------------------------------------------ handlers
    async def healthz(self, request: web.Request) -> web.Response:
        assert self.producer is not None and self.dedupe is not None
        kafka, redis = await asyncio.gather(self.producer.reachable(), self.dedupe.reachable())
        body = {
            "kafka": {"ok": kafka is None, **({"error": kafka} if kafka else {})},
            "redis": {"ok": redis is None, **({"error": redis} if redis else {})},
            "sources": sorted(self.sources),
        }
        return json_answer(body, 200 if kafka is None and redis is None else 503)

    async def webhook(self, request: web.Request) -> web.Response:
        name = request.match_info["source"]
        loaded = self.sources.get(name)
        if loaded is None:
            return error_answer(404, f"unknown webhook source '{name[:64]}'")
        body = await read_body(request, MAX_BODY_BYTES, self.settings.connector_read_timeout_s)
        if isinstance(body, web.Response):
            return body
        source = loaded.source
        try:
            verified = verify_delivery(
                source, loaded.secrets, request.headers, body, self.clock.now_ms() / 1000
            )
        except SignatureError as exc:
            log.info("webhook %s refused: %s", name, exc)
            return error_answer(401, str(exc))
        except InvalidInputError as exc:
            log.info("webhook %s refused: %s", name, exc)
            return error_answer(400, str(exc))
        if verified.reply is not None:
            log.info("webhook %s: answered the %s handshake", name, verified.event_type)
            return json_answer(verified.reply, 200)
        event_id = verified.event_id
        try:
            event = WebhookEvent(event_id, verified.event_type, verified.body)
            command = source.command_of(event, self.app)
        except InvalidInputError as exc:
            log.info("webhook %s refused: %s", name, exc)
            return error_answer(400, str(exc))
        except KeelError as exc:  # the source's declaration is wrong, not the delivery
            log.error("webhook %s: %s", name, exc)
            return error_answer(500, str(exc))
        try:
            return await self._deliver(source, event_id, command.workflow_id, command.payload)
        except UnavailableError as exc:
            log.warning("webhook %s event %s: 503: %s", name, event_id, exc)
            return error_answer(503, str(exc), **{"Retry-After": "1"})

    async def _deliver(
        self, source: WebhookSource, event_id: str, workflow_id: str, payload: Any
    ) -> web.Response:
        assert self.producer is not None and self.dedupe is not None
        mid = message_id(source.name, event_id)
        answer = {
            "source": source.name,
            "event_id": event_id,
            "workflow_id": workflow_id,
            "message_id": mid,
        }
        claim = await self.dedupe.claim(source.name, event_id)
        if claim.state is ClaimState.DONE:
            log.info("webhook %s event %s: duplicate", source.name, event_id)
            return json_answer({"status": Outcome.DUPLICATE, "duplicate": True, **answer}, 200)
        if claim.state is ClaimState.IN_FLIGHT:
            return error_answer(
                409,
                f"event '{event_id}' of source '{source.name}' is being delivered by another "
                "request; retry later",
                **{"Retry-After": "1"},
            )
        try:
            refusal = await self._refusal(workflow_id, payload)
            if refusal is None:
                await self._produce(source.name, event_id, mid, workflow_id, payload)
        except BaseException:
            await self.dedupe.release(source.name, event_id, claim.token)
            raise
        if refusal is not None:
            await self.dedupe.release(source.name, event_id, claim.token)
            status, why = refusal
            log.info("webhook %s event %s: %d: %s", source.name, event_id, status, why)
            return error_answer(status, why)
        try:
            await self.dedupe.done(source.name, event_id, source.dedupe_ttl_s, workflow_id, mid)
        except UnavailableError as exc:
            # the record is durable; a repeat is stopped by its message id instead
            log.warning("webhook %s event %s: not marked delivered: %s", source.name, event_id, exc)
        log.info("webhook %s event %s: accepted for %s", source.name, event_id, workflow_id)
        return json_answer({"status": Outcome.ACCEPTED, "duplicate": False, **answer}, 202)

    async def _refusal(self, workflow_id: str, payload: Any) -> tuple[int, str] | None:
        """A signal the run cannot take is answered now, not accepted (``signal_refusal``)."""
        if not isinstance(payload, SignalWorkflow):
            return None
        rows = self.tasks.desk_client.projection

        def look() -> dict[str, Any] | None:
            with reachable(self.settings.redis):
                return rows.get(workflow_id)

        row = await asyncio.get_running_loop().run_in_executor(None, look)
        return signal_refusal(self.app, workflow_id, payload.signal_name, row)

    async def _produce(
        self, source: str, event_id: str, mid: str, workflow_id: str, payload: Any
    ) -> None:
        assert self.producer is not None
        with self._tracer.start_as_current_span(f"keel.connector webhook {source}"):
            traceparent = tracing.current_traceparent()
            env = command_envelope(
                mid,
                workflow_id,
                payload,
                self.clock.now_ms(),
                correlation_id=workflow_id,
                traceparent=traceparent,
            )
            headers: list[tuple[str, str | bytes | None]] = [
                ("keel-webhook-source", source.encode()),
                ("keel-webhook-event-id", event_id.encode("utf-8", "replace")),
            ]
            if traceparent:
                headers.append(("traceparent", traceparent.encode()))
            await self.producer.send(
                self.settings.topic("commands"),
                workflow_id.encode(),
                self.codec.encode(env),
                headers,
            )


@dataclass
class _Tasks:
    api: TaskApi
    desk_client: KeelClient


def _task_api(settings: Settings, app: KeelApp, codec: Codec) -> _Tasks:
    """The human-task routes: actors from ``KEEL_ACTORS_FILE``, the task-token key (a
    ``ConfigError`` at startup when the app declares human tasks and none can be had)."""
    actors = Actors.load(settings.actors_file)
    tokens = tokens_for_app(settings, app)
    client = KeelClient(settings, app, codec=codec)
    desk = client.human_tasks()
    view = desk.tasks
    if tokens is not None and not actors:
        log.warning("human tasks: no actors configured (KEEL_ACTORS_FILE); nobody may decide")
    api = TaskApi(actors, view, desk, tokens, read_timeout_s=settings.connector_read_timeout_s)
    return _Tasks(api, client)


async def metrics_page(_request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus' text exposition of this process (docs/metrics.md).
    Unauthenticated, as scrapers expect: it holds counts, never an id or a payload."""
    body, content_type = exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})


def create_app(connector: Connector) -> web.Application:
    web_app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[json_errors])
    web_app.router.add_get("/healthz", connector.healthz)
    web_app.router.add_get("/metrics", metrics_page)
    web_app.router.add_post("/webhooks/{source}", connector.webhook)
    connector.tasks.api.add_routes(web_app)
    mount_ui(
        web_app,
        connector.settings,
        connector.app,
        connector.tasks.api,
        connector.tasks.desk_client,
        connector.clock,
    )

    async def lifecycle(_app: web.Application) -> Any:
        await connector.open()
        yield
        await connector.close()

    web_app.cleanup_ctx.append(lifecycle)
    return web_app


async def serve(connector: Connector, host: str, port: int) -> None:
    """Serve until SIGTERM/SIGINT; prints ``connector listening on http://HOST:PORT``.

    aiohttp's keep-alive timer runs from a connection's open and from each answer, and closes
    the connection when no whole request head arrived by then: that is the header timeout
    (a trickling client gains nothing). The body has as long again (:func:`read_body`), and a
    body left unread is drained for at most that long before the connection closes.
    """
    timeout_s = connector.settings.connector_read_timeout_s
    runner = web.AppRunner(
        create_app(connector),
        access_log=None,
        keepalive_timeout=timeout_s,
        lingering_time=timeout_s,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    sources = ", ".join(sorted(connector.sources)) or "none declared"
    print(f"connector listening on http://{bound_host}:{bound_port} (sources: {sources})",
          flush=True)  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
