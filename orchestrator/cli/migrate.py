"""``keel workflow migrate``: move live runs to a newer version, as a recorded act.

One run (``keel workflow migrate ID --to-version N``) or a batch selected from the read
model (``--name NAME --from-version M [--state S]``). ``--dry-run`` writes nothing: it
shows, per run, the mapping and the events the migration would write (or why it is
refused) and where the target version would have decided the run's recorded history
differently. Without it, the command is sent and the orchestrator's answer awaited:
exit 1 when any run is refused, else 5 when any is not answered in time. See
docs/versioning.md.
"""

from __future__ import annotations

import getpass
import json
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app_spec import AppOption, app_from
from orchestrator.cli.output import LazyConsole
from orchestrator.runtime.exit_codes import ExitCode

if TYPE_CHECKING:
    from orchestrator.client.migration_requests import MigrationPlan

console = LazyConsole(highlight=False, emoji=False, soft_wrap=True)


def migrate(
    workflow_id: Annotated[
        str | None, typer.Argument(help="The run to migrate (or select a batch with --name).")
    ] = None,
    to_version: Annotated[int, typer.Option("--to-version", help="The version to move to.")] = 0,
    name: Annotated[
        str | None, typer.Option("--name", help="Batch: live runs of this workflow.")
    ] = None,
    from_version: Annotated[
        int | None, typer.Option("--from-version", help="Batch: runs on this version.")
    ] = None,
    state: Annotated[
        str | None, typer.Option("--state", help="Batch: only runs in this state.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would happen; write nothing.")
    ] = False,
    reason: Annotated[str, typer.Option(help="Why (recorded).")] = "migrated by operator",
    actor: Annotated[str | None, typer.Option(help="Who (recorded; default: you).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answers.")] = 30.0,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: AppOption = None,
) -> None:
    """Move live runs to another version of their workflow (recorded: who, why)."""
    from orchestrator.client.client import KeelClient
    from orchestrator.client.migration_requests import Outcome
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import InvalidInputError

    if to_version < 1:
        raise InvalidInputError("--to-version N is required (a version >= 1)")
    if (workflow_id is None) == (name is None):
        raise InvalidInputError("give one workflow ID, or a batch with --name and --from-version")
    if name is not None and from_version is None:
        raise InvalidInputError("a batch needs --from-version (the version its runs are on)")
    who = actor or getpass.getuser()
    settings = load_settings()
    client = KeelClient(settings, app_from(app))
    if workflow_id is not None:
        ids = [workflow_id]
    else:
        assert name is not None and from_version is not None
        ids = client.migrations.select(name, from_version, state)
    if not ids:
        _out(json_, {"runs": 0, "dry_run": dry_run}, "no live run matches")
        return
    if dry_run:
        plans = client.migrations.plan(ids, to_version, who, reason)
        if json_:
            typer.echo(json.dumps({"dry_run": True, "plans": [p.as_dict() for p in plans]}))
        else:
            _print_plans(plans)
        refused = any(p.outcome is Outcome.REFUSED for p in plans)
    else:
        outcomes = client.migrations.send(ids, to_version, who, reason, timeout)
        client.close()
        if json_:
            typer.echo(json.dumps({"dry_run": False, "outcomes": [o.as_dict() for o in outcomes]}))
        for o in outcomes:
            if json_:
                continue
            if o.outcome is Outcome.MIGRATED and o.event is not None:
                data = o.event["data"]
                console.print(
                    f"migrated: {o.workflow_id} v{data['from_version']} -> v{data['to_version']}, "
                    f"state '{data['from_state']}' -> '{data['to_state']}' ({data['migration']})",
                    markup=False,
                )
            else:
                console.print(f"{o.outcome}: {o.workflow_id}: {o.reason}", markup=False)
        refused = any(o.outcome is Outcome.REFUSED for o in outcomes)
        if not refused and any(o.outcome is Outcome.PENDING for o in outcomes):
            raise typer.Exit(ExitCode.PENDING)
    if refused:
        raise typer.Exit(ExitCode.FAILED)


def _out(json_: bool, obj: dict, text: str) -> None:
    if json_:
        typer.echo(json.dumps(obj))
    else:
        console.print(text, markup=False)


def _print_plans(plans: list[MigrationPlan]) -> None:
    from orchestrator.client.migration_requests import Outcome

    if len(plans) > 1:
        by_position: dict[tuple[str, str], int] = {}
        for p in plans:
            key = (p.from_state, p.to_state if p.outcome is Outcome.WOULD_MIGRATE else "refused")
            by_position[key] = by_position.get(key, 0) + 1
        for (src, dst), n in sorted(by_position.items()):
            console.print(f"{n} run(s) in state '{src}' -> {dst}", markup=False)
    for p in plans:
        head = f"{p.workflow_id} ({p.name} v{p.from_version}, {p.status} in '{p.from_state}')"
        if p.outcome is Outcome.REFUSED:
            console.print(f"would be refused: {head}: {p.reason}", markup=False)
        else:
            console.print(
                f"would migrate: {head} -> v{p.to_version} state '{p.to_state}' "
                f"(digest {p.to_digest[:12]})",
                markup=False,
            )
            for e in p.events:
                console.print(f"  would write: {json.dumps(e)}", markup=False)
        r = p.replay
        if r is None:
            continue
        d = r.divergence
        if d is None:
            console.print(
                f"  replay on v{p.to_version}: the recorded history decides identically",
                markup=False,
            )
            continue
        console.print(
            f"  replay on v{p.to_version}: differs at seq {d.seq}"
            + (f" deciding {d.command}" if d.command else ""),
            markup=False,
        )
        if d.note:
            console.print(f"    {d.note}", markup=False)
        for label, ev in (("recorded", d.expected), (f"v{p.to_version}", d.got)):
            text = "(no event)" if ev is None else json.dumps(ev)
            console.print(f"    {label}: {text}", markup=False)
    console.print("dry run: nothing was written", markup=False)
