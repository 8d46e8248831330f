"""``keel schedules create | list | show | pause | resume | delete`` (docs/schedules.md).

Thin wrappers of ``KeelClient.schedules``; strings from the user or the read model are
escaped before they reach rich markup.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app_spec import AppOption, service_app
from orchestrator.cli.output import LazyConsole, new_table

if TYPE_CHECKING:
    from orchestrator.client.client import KeelClient
    from orchestrator.client.schedule_client import ScheduleInfo

schedules_app = typer.Typer(help="Durable schedules: start a workflow on a cron or an interval.")
console = LazyConsole(highlight=False, emoji=False)

NameArg = Annotated[str, typer.Argument(help="The schedule's name.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _client(app: str | None) -> KeelClient:
    from orchestrator.client.client import KeelClient
    from orchestrator.config.settings import load_settings

    return KeelClient(load_settings(), service_app(app))


@schedules_app.command("create")
def create(
    name: NameArg,
    workflow: Annotated[str, typer.Option("--workflow", help="The workflow each tick starts.")],
    input_: Annotated[
        str, typer.Option("--input", help="Its input: JSON text, @FILE or - (stdin).")
    ] = "{}",
    cron: Annotated[
        str | None, typer.Option("--cron", help="Five cron fields, e.g. '*/5 * * * *'.")
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", help="An interval instead: 2s, 5m, 1h, 1d.")
    ] = None,
    timezone: Annotated[
        str, typer.Option("--timezone", help="The zone --cron is read in (IANA name).")
    ] = "UTC",
    overlap: Annotated[
        str, typer.Option("--overlap", help="skip | buffer_one | allow_all.")
    ] = "skip",
    catchup_window: Annotated[
        float,
        typer.Option("--catchup-window", help="Seconds a late tick may still fire."),
    ] = 60.0,
    version: Annotated[int | None, typer.Option(help="The workflow's version.")] = None,
    json_: JsonOption = False,
    app: AppOption = None,
) -> None:
    """Create a schedule; the same spec again changes nothing, another is refused."""
    from orchestrator.client.json_args import read_json_arg

    input_obj = read_json_arg(input_, "--input")
    client = _client(app)
    try:
        info = client.schedules.create(
            name,
            workflow,
            input_obj,
            cron=cron,
            every=every,
            timezone=timezone,
            overlap=overlap,
            catchup_window_s=catchup_window,
            version=version,
        )
    finally:
        client.close()
    if json_:
        typer.echo(json.dumps(info.as_dict()))
        return
    nxt = info.next_fires[0] if info.next_fires else "-"
    console.print(f"schedule {info.name}: {info.timing}, next {nxt}", markup=False)


@schedules_app.command("list")
def list_(
    deleted: Annotated[bool, typer.Option("--deleted", help="Include deleted ones.")] = False,
    json_: JsonOption = False,
    app: AppOption = None,
) -> None:
    """Every schedule with its state and next fire time."""
    client = _client(app)
    try:
        found = client.schedules.list(include_deleted=deleted)
    finally:
        client.close()
    if json_:
        typer.echo(json.dumps([i.as_dict() for i in found]))
        return
    table = new_table("name", "state", "timing", "workflow", "overlap", "next fire", "started")
    for i in found:
        table.add_row(
            i.name,
            i.state,
            i.timing,
            str(i.spec["workflow"]),
            str(i.spec["overlap"]),
            i.next_fires[0] if i.next_fires else "-",
            str(i.started),
        )
    console.print(table)


@schedules_app.command("show")
def show(
    name: NameArg,
    fires: Annotated[int, typer.Option("--fires", help="How many next fire times.")] = 5,
    json_: JsonOption = False,
    app: AppOption = None,
) -> None:
    """One schedule: its spec, state, next fire times and latest ticks."""
    client = _client(app)
    try:
        info = client.schedules.show(name, fires=max(0, fires))
    finally:
        client.close()
    if json_:
        typer.echo(json.dumps(info.as_dict()))
        return
    _print_info(info)


def _print_info(info: ScheduleInfo) -> None:
    spec = info.spec
    lines = [
        f"schedule {info.name} ({info.workflow_id}): {info.state}",
        f"  timing:    {info.timing}",
        f"  starts:    {spec['workflow']} {json.dumps(spec['input'])}",
        f"  overlap:   {spec['overlap']}, catch-up window {spec['catchup_window_ms'] // 1000}s",
        f"  started:   {info.started} runs, {info.skipped} ticks skipped",
        f"  last run:  {info.last_run or '-'}",
    ]
    if info.buffered:
        lines.append(f"  buffered:  {info.buffered}")
    lines.append("  next:      " + (", ".join(info.next_fires) or "-"))
    for line in lines:
        console.print(line, markup=False)
    if info.recent:
        table = new_table("tick", "outcome", "run", "detail")
        for r in info.recent:
            table.add_row(
                r["tick"],
                str(r["outcome"]),
                str(r.get("workflow_id") or "-"),
                str(r.get("detail") or ""),
            )
        console.print(table)


def _control(app: str | None, name: str, op: str) -> None:
    client = _client(app)
    try:
        getattr(client.schedules, op)(name)
    finally:
        client.close()
    console.print(f"schedule {name}: {op} sent", markup=False)


@schedules_app.command("pause")
def pause(name: NameArg, app: AppOption = None) -> None:
    """Stop firing until resumed; ticks of the pause are never fired."""
    _control(app, name, "pause")


@schedules_app.command("resume")
def resume(name: NameArg, app: AppOption = None) -> None:
    """Fire again from the next tick."""
    _control(app, name, "resume")


@schedules_app.command("delete")
def delete(name: NameArg, app: AppOption = None) -> None:
    """End the schedule; the runs it started go on."""
    _control(app, name, "delete")
