"""``keel topics create``: Keel's topics, created if missing, with their replication."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.output import LazyConsole, new_table

topics_app = typer.Typer(help="Topic provisioning.")
console = LazyConsole(highlight=False, emoji=False)


@topics_app.command("create")
def topics_create(
    partitions: Annotated[
        int | None, typer.Option(help="Partitions per topic (default KEEL_PARTITIONS).")
    ] = None,
) -> None:
    """Create Keel's topics if missing (idempotent) and report them."""
    from orchestrator.config.settings import load_settings
    from orchestrator.io.kafka.topics import create_topics

    settings = load_settings() if partitions is None else load_settings(partitions=partitions)
    reports = create_topics(settings)
    table = new_table("topic", "partitions", "replicas", "min ISR", "state")
    for r in reports:
        table.add_row(
            r.name,
            str(r.partitions),
            str(r.replication_factor or "-"),
            str(r.min_insync_replicas or "-"),
            "created" if r.created else "exists",
        )
    console.print(table)
