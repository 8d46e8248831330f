"""``keel infra up|down|status`` and ``keel topics create``: the local stack and its topics."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.output import LazyConsole, escape, new_table

if TYPE_CHECKING:
    from ops.local import StackStatus

infra_app = typer.Typer(help="Local Kafka (KRaft) and Redis for a laptop, tests and benchmarks.")
topics_app = typer.Typer(help="Topic provisioning.")
console = LazyConsole(highlight=False, emoji=False)


def _print_status(status: StackStatus, as_json: bool, headline: str | None = None) -> None:
    from orchestrator.settings import redact

    if as_json:
        typer.echo(json.dumps(status.to_json()))
        return
    if headline:
        console.print(headline)
    if not status.processes:
        console.print("no local stack is running")
        return
    table = new_table("role", "node", "pid", "port", "healthy")
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
    from ops.local import LocalStack
    from orchestrator.settings import load_settings

    stack = LocalStack(load_settings(), brokers=brokers)
    was_running = stack.status().running
    status = stack.up()
    headline = "already running:" if was_running else "started:"
    _print_status(status, json_, headline)


#: A status file older than this belongs to a process that stopped or hangs.
STALE_AFTER_S = 15.0


def service_health(home: Path, now: float | None = None) -> list[dict[str, Any]]:
    """What each Keel process last wrote to ``<KEEL_HOME>/status/*.json``, with a verdict.

    A live process has problems when its file is stale (it hangs), a background thread
    died, a supervised loop waits out a failure before its restart (a projector child
    that keeps exiting, say), or it is not running (recovering, resetting); a process
    that is gone (stopped, or killed) is listed as such and is no problem of the running
    stack.
    """
    import psutil

    now = time.time() if now is None else now
    rows = []
    for path in sorted((home / "status").glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        age = now - float(data.get("updated_at", 0))
        pid = data.get("pid")
        gone = data.get("state") == "stopped" or not (
            isinstance(pid, int) and psutil.pid_exists(pid)
        )
        dead = sorted(name for name, alive in data.get("threads", {}).items() if not alive)
        problems = []
        if not gone:
            if age > STALE_AFTER_S:
                problems.append(f"no update for {age:.0f}s")
            if dead:
                problems.append("dead threads: " + ", ".join(dead))
            if data.get("state") not in (None, "running"):
                problems.append(f"state {data.get('state')}")
            restarting = [
                f"{name} ({info.get('restarts', 0)} restarts; {info.get('last_error') or '?'})"
                for name, info in sorted(data.get("supervised", {}).items())
                if isinstance(info, dict) and info.get("state") == "backoff"
            ]
            if restarting:
                problems.append("restarting after a failure: " + ", ".join(restarting))
        rows.append(
            {"file": path.stem, **data, "age_s": round(age, 1), "gone": gone, "problems": problems}
        )
    return rows


def _verdict(row: dict[str, Any]) -> str:
    if row["gone"]:
        return f"gone (last report {row['age_s']:.0f}s ago)"
    if row["problems"]:
        return "[red]" + escape("; ".join(row["problems"])) + "[/red]"
    return "[green]ok[/green]"


def _print_services(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = new_table(
        "service", "partitions", "last commit", "resets", "stalled", "quarantined", "health"
    )
    for r in rows:
        commit = r.get("last_commit_age_s")
        table.add_row(
            escape(r["file"]),
            escape(str(r.get("assigned_partitions", "-"))),
            "-" if commit is None else f"{commit:.1f}s ago",
            str(r.get("producer_resets", 0)),
            str(r.get("stalled_calls", 0)),
            str(len(r.get("quarantined", []))),
            "[green]ok[/green]"
            if not r["problems"]
            else "[red]" + escape("; ".join(r["problems"])) + "[/red]",
        )
    console.print(table)


@infra_app.command("status")
def status(json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the local stack's processes and the health Keel's services last reported."""
    from ops.local import LocalStack
    from orchestrator.settings import load_settings

    settings = load_settings()
    current = LocalStack(settings).status()
    services = service_health(settings.home)
    if json_:
        typer.echo(json.dumps({**current.to_json(), "services": services}))
    else:
        _print_status(current, False)
        _print_services(services)
    if not current.healthy or any(r["problems"] for r in services):
        raise typer.Exit(3)


@infra_app.command("down")
def down() -> None:
    """Stop the local stack by its recorded PIDs and wait for every process to exit."""
    from ops.local import LocalStack
    from orchestrator.settings import load_settings

    stopped = LocalStack(load_settings()).down()
    if stopped:
        console.print("stopped: " + ", ".join(f"{r.role} (pid {r.pid})" for r in stopped))
    else:
        console.print("nothing was running")


@infra_app.command("fetch")
def fetch() -> None:
    """Fetch the pinned Kafka jars from Maven Central into KEEL_HOME (once)."""
    from ops.local import LocalStack
    from orchestrator.settings import load_settings

    path = LocalStack(load_settings()).fetch_kafka()
    console.print(f"Kafka jars in {path}")


@topics_app.command("create")
def topics_create(
    partitions: Annotated[
        int | None, typer.Option(help="Partitions per topic (default KEEL_PARTITIONS).")
    ] = None,
) -> None:
    """Create Keel's topics if missing (idempotent) and report them."""
    from orchestrator.io.kafka.topics import create_topics
    from orchestrator.settings import load_settings

    settings = load_settings() if partitions is None else load_settings(partitions=partitions)
    reports = create_topics(settings)
    table = new_table("topic", "partitions", "state")
    for r in reports:
        table.add_row(r.name, str(r.partitions), "created" if r.created else "exists")
    console.print(table)
