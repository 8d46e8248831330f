"""``keel dlq list | redrive | discard`` and ``keel workflow resolve``: the operator's repair
tools (docs/activities.md, "Dead letters")."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orchestrator.cli.app_spec import AppOption, UnusedAppOption, app_from
from orchestrator.cli.output import LazyConsole, new_table

dlq_app = typer.Typer(
    help="Dead letters: what needs an operator (activities past their bounds, "
    "records that could not be processed)."
)
console = LazyConsole(highlight=False)


@dlq_app.command("list")
def list_(
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    all_: Annotated[
        bool, typer.Option("--all", help="Also show letters already redriven or discarded.")
    ] = False,
    newest_first: Annotated[
        bool, typer.Option("--newest-first", help="The newest letter first.")
    ] = False,
    app: UnusedAppOption = None,
) -> None:
    """Open dead letters by time across partitions, oldest first (``--all``: closed too)."""
    from orchestrator.client.dead_letters import DeadLetters, LetterState, shown_time
    from orchestrator.config.settings import load_settings

    letters = DeadLetters(load_settings()).letters(newest_first=newest_first)
    shown = [x for x in letters if all_ or x.state == LetterState.OPEN]
    if json_:
        typer.echo(json.dumps([x.as_dict() for x in shown]))
        return
    table = new_table("id", "kind", "state", "workflow", "time (UTC)", "reason")
    for x in shown:
        state = x.state
        if x.closing is not None:
            by = f" by {x.closing.by}" if x.closing.by else ""
            why = f": {x.closing.reason}" if x.closing.reason else ""
            state = f"{x.state} {shown_time(x.closing.at)}{by}{why}"
        table.add_row(
            x.id,
            x.kind,
            state,
            x.workflow_id[:200],
            shown_time(x.recorded_at),
            x.reason,
        )
    console.print(table)
    for closed in (LetterState.REDRIVEN, LetterState.DISCARDED):
        hidden = sum(x.state == closed for x in letters) - sum(x.state == closed for x in shown)
        if hidden:
            console.print(
                f"{hidden} {closed} letter(s) not shown; `keel dlq list --all` shows them"
            )


@dlq_app.command("redrive")
def redrive(letter_id: str, app: AppOption = None) -> None:
    """Send a dead letter out again, once: a new attempt of an activity, or the record."""
    from orchestrator.client.dead_letters import DeadLetters
    from orchestrator.config.settings import load_settings

    console.print(DeadLetters(load_settings()).redrive(letter_id))


@dlq_app.command("discard")
def discard(
    letter_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why it needs nothing more (recorded).")],
    actor: Annotated[
        str | None, typer.Option("--actor", help="Who discards it (default: the OS user).")
    ] = None,
    app: UnusedAppOption = None,
) -> None:
    """Close a dead letter without sending anything, once; who, when and why are recorded."""
    from orchestrator.client.dead_letters import DeadLetters
    from orchestrator.config.settings import load_settings

    typer.echo(DeadLetters(load_settings()).discard(letter_id, reason, actor))


def resolve(
    workflow_id: str,
    activity_id: str,
    found: Annotated[
        str | None, typer.Option("--found", help="The effect happened; its result as JSON.")
    ] = None,
    not_found: Annotated[
        bool, typer.Option("--not-found", help="It did not happen: retry the same attempt.")
    ] = False,
    failed: Annotated[
        str | None, typer.Option("--failed", help="Give up with this reason.")
    ] = None,
    reason: Annotated[str, typer.Option(help="Why (recorded).")] = "resolved by operator",
    app: AppOption = None,
) -> None:
    """Settle an activity whose outcome Keel could not establish (needs_attention)."""
    from orchestrator.client.client import KeelClient, parse_json
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import KeelError

    chosen = [o for o in (found is not None, not_found, failed is not None) if o]
    if len(chosen) != 1:
        raise KeelError("give exactly one of --found JSON, --not-found, --failed REASON")
    client = KeelClient(load_settings(), app_from(app))
    if found is not None:
        mid = client.resolve(
            workflow_id, activity_id, "found", parse_json(found, "--found"), reason
        )
    elif not_found:
        mid = client.resolve(workflow_id, activity_id, "not_found", None, reason)
    else:
        mid = client.resolve(workflow_id, activity_id, "failed", None, failed or reason)
    console.print(f"resolution sent to {workflow_id} ({mid})")
