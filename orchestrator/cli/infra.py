"""``keel infra up|down|status`` and ``keel topics create``: the local stack and its topics."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ops.local import LocalStack, StackStatus
from ops.topics import create_topics
from orchestrator.settings import load_settings, redact

infra_app = typer.Typer(help="Local Kafka (KRaft) and Redis for a laptop, tests and benchmarks.")
topics_app = typer.Typer(help="Topic provisioning.")
console = Console(highlight=False, emoji=False)


def _print_status(status: StackStatus, as_json: bool, headline: str | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(status.to_json()))
        return
    if headline:
        console.print(headline)
    if not status.processes:
        console.print("no local stack is running")
        return
    table = Table("role", "node", "pid", "port", "healthy")
    for p in status.processes:
        mark = "[green]yes[/green]" if p.healthy else "[red]no[/red]"
        table.add_row(p.role, str(p.node_id or "-"), str(p.pid), str(p.port), mark)
    console.print(table)
    console.print(f"KEEL_BOOTSTRAP_SERVERS={redact(status.bootstrap_servers)}", markup=False)
    console.print(f"KEEL_REDIS_URL={redact(status.redis_url)}", markup=False)


@infra_app.command("up")
def up(
    brokers: Annotated[
        int | None,
        typer.Option(help="Number of KRaft nodes (default: the running stack's, else 1)."),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
) -> None:
    """Fetch Kafka once, start the broker(s) and Redis; return when both answer."""
    stack = LocalStack(load_settings(), brokers=brokers)
    was_running = stack.status().running
    status = stack.up()
    headline = "already running:" if was_running else "started:"
    _print_status(status, json_, headline)


@infra_app.command("status")
def status(json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the local stack's processes and whether each answers."""
    current = LocalStack(load_settings()).status()
    _print_status(current, json_)
    if not current.healthy:
        raise typer.Exit(3)


@infra_app.command("down")
def down() -> None:
    """Stop the local stack by its recorded PIDs and wait for every process to exit."""
    stopped = LocalStack(load_settings()).down()
    if stopped:
        console.print("stopped: " + ", ".join(f"{r.role} (pid {r.pid})" for r in stopped))
    else:
        console.print("nothing was running")


@infra_app.command("fetch")
def fetch() -> None:
    """Fetch the pinned Kafka jars from Maven Central into KEEL_HOME (once)."""
    path = LocalStack(load_settings()).fetch_kafka()
    console.print(f"Kafka jars in {path}")


@topics_app.command("create")
def topics_create(
    partitions: Annotated[
        int | None, typer.Option(help="Partitions per topic (default KEEL_PARTITIONS).")
    ] = None,
) -> None:
    """Create Keel's topics if missing (idempotent) and report them."""
    settings = load_settings() if partitions is None else load_settings(partitions=partitions)
    reports = create_topics(settings)
    table = Table("topic", "partitions", "state")
    for r in reports:
        table.add_row(r.name, str(r.partitions), "created" if r.created else "exists")
    console.print(table)
