"""``keel workers``: each limited activity type's limits and what it uses now, from Redis
(docs/limits.md, "Per-type limits")."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orchestrator.cli.app_spec import AppOption, service_app
from orchestrator.cli.output import LazyConsole, new_table

console = LazyConsole(highlight=False, soft_wrap=True)


def workers(
    app: AppOption = None,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per activity type with limits: max concurrent and running now, the rate limit,
    starts in its current window, starts reserved, and when the next may start."""
    from handlers.type_limits import read_usage
    from orchestrator.config.settings import load_settings

    settings = load_settings()
    application = service_app(app)
    limited = {t: h.limits for t, h in sorted(application.handlers.items()) if h.limits}
    rows = read_usage(settings.redis, settings.topic_prefix, limited)
    if json_:
        typer.echo(
            json.dumps(
                [
                    {
                        "activity_type": u.activity_type,
                        "max_concurrent": u.limits.max_concurrent,
                        "running": u.running,
                        "rate_limit": str(u.limits.rate) if u.limits.rate else None,
                        "started_in_window": u.started_in_window,
                        "reserved": u.reserved,
                        "next_start_in_ms": u.next_start_in_ms,
                    }
                    for u in rows
                ]
            )
        )
        return
    if not rows:
        console.print(f"no activity type of {app} declares a limit")
        return
    table = new_table(
        "activity type", "max concurrent", "running", "rate limit", "started", "reserved", "next"
    )
    for u in rows:
        rate = u.limits.rate
        table.add_row(
            u.activity_type,
            str(u.limits.max_concurrent or "-"),
            str(u.running) if u.limits.max_concurrent else "-",
            str(rate) if rate else "-",
            str(u.started_in_window) if rate else "-",
            str(u.reserved) if rate else "-",
            (f"in {u.next_start_in_ms / 1000:.1f}s" if u.next_start_in_ms else "now")
            if rate
            else "-",
        )
    console.print(table)
