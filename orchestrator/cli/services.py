"""``keel orchestrator | worker | projector`` and ``keel projections rebuild``.

Each command imports the runtime it runs inside its body: a service process loads what
its own loop needs and nothing of the other commands (the orchestrator, say, no client,
connector or local-stack tooling).
"""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app_spec import (
    AppOption,
    UnusedAppOption,
    app_from,
    app_spec,
    service_app,
)
from orchestrator.cli.output import LazyConsole, new_table
from orchestrator.projector.placement import ProjectorPlacement

if TYPE_CHECKING:
    from orchestrator.config.settings import Settings
    from orchestrator.telemetry.prometheus import KafkaGauges, ServiceMetrics

MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve Prometheus /metrics on this port (docs/metrics.md); 0: none. "
        "Default: KEEL_METRICS_PORT.",
        show_default=False,
    ),
]
console = LazyConsole(highlight=False, emoji=False)
projections_app = typer.Typer(help="Read models rebuilt from keel.events.")


def kafka_gauges(settings: Settings) -> KafkaGauges:
    """The consumer lag and open dead letters of the deployment, read on scrape (the
    orchestrator's endpoint: one reader per orchestrator, not one per service)."""
    from collections import Counter

    from orchestrator.client.dead_letters import DeadLetters, LetterKind
    from orchestrator.io.kafka.backlog import consumer_lag
    from orchestrator.telemetry.prometheus import CachedSource, KafkaGauges

    letters = DeadLetters(settings)

    def open_letters() -> dict[tuple[str], int]:
        counts = Counter(x.kind for x in letters.letters(include_closed=False))
        return {(str(kind),): counts.get(kind, 0) for kind in LetterKind}

    return KafkaGauges(
        CachedSource("consumer_lag", lambda: consumer_lag(settings)),
        CachedSource("dlq", open_letters),
    )


def serve_metrics_of(
    settings: Settings, port: int | None, metrics: ServiceMetrics, gauges: bool = False
) -> None:
    """Start the service's ``/metrics`` endpoint for its ``metrics`` when a port is set
    (option, else ``KEEL_METRICS_PORT``), with the Kafka gauges if ``gauges`` (also exported
    through OpenTelemetry when an OTLP endpoint is set, port or none); prints where."""
    import os

    from orchestrator.telemetry.metrics import ENDPOINT_VARS

    port = settings.metrics_port if port is None else port
    otel = gauges and any(os.environ.get(v) for v in ENDPOINT_VARS)
    if not port and not otel:
        return
    collectors = [kafka_gauges(settings)] if gauges else []
    if otel:
        for collector in collectors:
            collector.register_otel()
    if port:
        bound = metrics.serve(port, settings.metrics_host, collectors)
        print(f"metrics on http://{settings.metrics_host}:{bound}/metrics", flush=True)


def _stop_on_signals(*stoppables) -> None:
    def handler(signum, frame):
        for s in stoppables:
            s.stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def orchestrator(
    app: AppOption = None,
    projector: Annotated[bool, typer.Option(help="Also run the projector in this process.")] = True,
    sagas: Annotated[
        bool, typer.Option(help="Also run the saga manager, when the app declares sagas.")
    ] = True,
    checkpoint_interval: Annotated[
        float, typer.Option(help="Seconds between snapshot checkpoints.")
    ] = 30.0,
    projector_in: Annotated[
        ProjectorPlacement | None,
        typer.Option(
            case_sensitive=False,
            help="Where the projector runs: a child process fed the committed events by pipe"
            " (the default), or a thread of this process.",
        ),
    ] = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Run the orchestrator: decide commands into events, exactly once."""
    if projector_in is not None and not projector:
        raise typer.BadParameter("--projector-in and --no-projector exclude each other")
    from orchestrator.application.saga_declarations import sagas_of
    from orchestrator.config.settings import load_settings
    from orchestrator.embedding.service_parts import ServiceParts
    from orchestrator.runtime.supervisor import Supervisor
    from orchestrator.telemetry.gc_policy import configure_gc
    from orchestrator.telemetry.logs import configure_logging
    from orchestrator.telemetry.metrics import configure_metrics
    from orchestrator.telemetry.tracing import configure_tracing

    configure_logging()
    configure_tracing("keel-orchestrator")
    configure_metrics("keel-orchestrator")
    settings = load_settings()
    configure_gc(settings)
    # the one clock, codec, hooks, metrics and attempt runner of this process
    parts = ServiceParts.build(app_from(app), settings)
    publisher = None
    placement = projector_in or ProjectorPlacement.CHILD
    metrics_dir = None
    if projector and placement is ProjectorPlacement.CHILD:
        from orchestrator.io.handoff.committed_pipe import PipePublisher

        publisher = PipePublisher()
        if (settings.metrics_port if metrics_port is None else metrics_port) > 0:
            # the child's counts, summed by this process's endpoint (docs/metrics.md)
            from orchestrator.telemetry.prometheus import use_multiprocess_dir

            metrics_dir = use_multiprocess_dir(settings.home, "orchestrator")
    serve_metrics_of(settings, metrics_port, parts.metrics, gauges=True)
    orch = parts.orchestrator(checkpoint_interval_s=checkpoint_interval, committed=publisher)
    stoppables: list = [orch]
    child = None
    if publisher is not None:
        from orchestrator.projector.projector_child import ProjectorChild

        # Supervised like the thread: a child that dies is started again after a backoff.
        child = Supervisor("projector", ProjectorChild(app_spec(app), publisher)).start()
        stoppables.append(child)
    elif projector:
        # Its health is in ``supervisor.health_of_all()`` for the process's status; it is
        # fed this process's committed events in process (docs/performance.md,
        # "Where the projector runs").
        from orchestrator.io.handoff.committed_channel import CommittedEvents

        assert isinstance(orch.committed, CommittedEvents)  # this process's channel
        stoppables.append(Supervisor("projector", parts.projector(orch.committed)).start())
    if sagas and sagas_of(parts.app):  # the saga manager (docs/sagas.md)
        stoppables.append(Supervisor("sagas", parts.saga_manager()).start())
    _stop_on_signals(*stoppables)
    try:
        orch.run()
    finally:
        if child is not None and publisher is not None:  # it ends with its pipe
            child.stop()
            child.join(30)
            publisher.stop()
        if metrics_dir is not None:
            import shutil

            shutil.rmtree(metrics_dir, ignore_errors=True)


def worker(app: AppOption = None, metrics_port: MetricsPortOption = None) -> None:
    """Run an activity worker for the application's handlers."""
    from orchestrator.config.settings import load_settings
    from orchestrator.embedding.service_parts import ServiceParts
    from orchestrator.telemetry.gc_policy import configure_gc
    from orchestrator.telemetry.logs import configure_logging
    from orchestrator.telemetry.metrics import configure_metrics
    from orchestrator.telemetry.tracing import configure_tracing

    configure_logging()
    configure_tracing("keel-worker")
    configure_metrics("keel-worker")
    settings = load_settings()
    configure_gc(settings)
    # the one clock, hooks, metrics and attempt runner (sealing keys, LLM runtime) of this process
    parts = ServiceParts.build(app_from(app), settings)
    w = parts.worker()
    _stop_on_signals(w)
    serve_metrics_of(settings, metrics_port, parts.metrics)
    w.run()


def projector(
    app: AppOption = None,
    feed_fd: Annotated[
        int | None,
        typer.Option(help="A pipe from its orchestrator (its default projector); ends with it."),
    ] = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Run the projector alone: keel.events -> the Redis read model."""
    from orchestrator.config.settings import load_settings
    from orchestrator.embedding.service_parts import ServiceParts
    from orchestrator.runtime.supervisor import Supervisor
    from orchestrator.telemetry.gc_policy import configure_gc
    from orchestrator.telemetry.logs import configure_logging
    from orchestrator.telemetry.metrics import configure_metrics

    configure_logging()
    configure_metrics("keel-projector")
    committed = None
    if feed_fd is not None:
        from orchestrator.io.handoff.committed_channel import CommittedEvents

        committed = CommittedEvents()
    settings = load_settings()
    configure_gc(settings)
    # the one clock, codec and metrics of this process
    parts = ServiceParts.build(app_from(app), settings)
    projector = parts.projector(committed)
    if feed_fd is None:  # a child's counts are served by its orchestrator (docs/metrics.md)
        serve_metrics_of(settings, metrics_port, parts.metrics)
    supervised = Supervisor("projector", projector).start()
    if committed is not None and feed_fd is not None:
        from orchestrator.io.handoff.committed_pipe import read_frames

        read_frames(feed_fd, committed, supervised.stop, parts.codec)  # ends with its orchestrator
    _stop_on_signals(supervised)
    while supervised.state != "stopped":
        supervised.join(0.5)


@projections_app.command("rebuild")
def rebuild(app: AppOption = None) -> None:
    """Drop the Redis read model and replay every event of keel.events into it.

    Safe while services run: live projectors pause until it ends, then reload. Refused,
    with nothing changed, when the events hold a workflow the application does not define.
    """
    from orchestrator.config.settings import load_settings
    from orchestrator.projector.projector import Projector
    from orchestrator.projector.rebuild_guard import recorded_events, refuse_undefined

    settings, spec = load_settings(), app_spec(app)
    application = service_app(spec)
    refuse_undefined(recorded_events(settings), application.definitions, spec)
    p = Projector(settings, application)
    total, took = p.rebuild()
    rate = total / took if took > 0 else 0.0
    console.print(f"rebuilt the read model from {total} events in {took:.2f}s ({rate:,.0f}/s)")


@projections_app.command("status")
def projections_status(
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: UnusedAppOption = None,
) -> None:
    """Each live projector's health (published every few seconds), and any rebuild running."""
    from orchestrator.config.settings import load_settings
    from orchestrator.io.redis.read_model import Projection

    settings = load_settings()
    projection = Projection.from_url(settings.redis, settings.topic_prefix)
    status = projection.health()
    if json_:
        typer.echo(json.dumps(status))
        return
    if status["rebuild_running"]:
        console.print("a rebuild of the read model is running")
    if not status["projectors"]:
        console.print("no projector reported in the last 30s")
    table = new_table("instance", "alive", "applied", "skipped", "last applied (UTC)", "last error")
    for p in status["projectors"]:
        when = p.get("last_applied_at")
        shown = (
            datetime.fromtimestamp(when / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S") if when else "-"
        )
        table.add_row(
            str(p.get("instance")),
            "yes" if p.get("alive") else "no",
            str(p.get("applied", 0)),
            str(p.get("skipped", 0)),
            shown,
            str(p.get("last_error") or "-"),
        )
    console.print(table)
