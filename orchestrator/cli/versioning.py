"""``keel replay-check`` and ``keel workflow export``: check new code against recorded runs.

``replay-check`` exits 1 when any run's decisions differ from its recorded ones (the
report names the first differing event), 0 when every run replays identically. Runs
whose definition was edited in place (same version, other digest) are flagged; that
alone does not fail the check, since a refactoring may keep every decision (and a new
Python release changes digests), but it is what to look at when a run does diverge.
See docs/versioning.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.app_spec import AppOption, UnusedAppOption, service_app
from orchestrator.cli.output import LazyConsole, new_table, styled
from orchestrator.runtime.exit_codes import ExitCode

if TYPE_CHECKING:
    from orchestrator.domain.history.replay import RunReport

console = LazyConsole(highlight=False, soft_wrap=True)


def replay_check(
    app: AppOption = None,
    from_topic: Annotated[
        bool, typer.Option("--from-topic", help="Replay every run in keel.events.")
    ] = False,
    histories: Annotated[
        Path | None,
        typer.Option("--histories", help="Replay the exported *.jsonl histories under DIR."),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Re-decide recorded runs with this code; exit 1 on the first differing decision."""
    from orchestrator.application.app import decider_of
    from orchestrator.client.history_io import read_history_dir, read_topic_history
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.history.replay import replay_history
    from orchestrator.domain.model.errors import KeelError
    from orchestrator.trust.human_task_tokens import recorded_token_hashes

    if from_topic == (histories is not None):
        raise KeelError("give exactly one of --from-topic and --histories DIR")
    if histories is not None:
        envelopes: Any = list(read_history_dir(histories))
        source = str(histories)
    else:
        envelopes = list(read_topic_history(load_settings()))
        source = "keel.events"
    # A task token's hash depends on the deployment's key, not the code: replay with the
    # hashes the history recorded, so only the decisions themselves are compared.
    decider = decider_of(service_app(app), recorded_token_hashes(envelopes))
    reports = replay_history(decider, envelopes)
    diverged = [r for r in reports if not r.ok]
    if json_:
        typer.echo(
            json.dumps(
                {
                    "source": source,
                    "runs": len(reports),
                    "diverged": len(diverged),
                    "digest_changed": sum(r.digest_changed for r in reports),
                    "reports": [r.to_dict() for r in reports],
                }
            )
        )
    else:
        _print(reports, source)
    if diverged:
        raise typer.Exit(ExitCode.FAILED)


def _print(reports: list[RunReport], source: str) -> None:
    by_def: dict[tuple[str, int], list[RunReport]] = {}
    for r in reports:
        by_def.setdefault((r.name, r.version), []).append(r)
    table = new_table("workflow", "version", "runs", "identical", "diverged", "in-place edits")
    for (name, version), rs in sorted(by_def.items()):
        table.add_row(
            name or "?",
            str(version),
            str(len(rs)),
            str(sum(r.ok for r in rs)),
            str(sum(not r.ok for r in rs)),
            str(sum(r.digest_changed for r in rs)),
        )
    console.print(table)
    for r in reports:
        label = f"{r.workflow_id} ({r.name} v{r.version})"
        if r.digest_changed:
            console.print(
                styled(
                    ("edited in place:", "yellow"),
                    f" {label}: digest {r.recorded_digest[:12]} "
                    f"recorded, {r.current_digest[:12]} now (same version)",
                )
            )
        if r.folded_only:
            kinds = ", ".join(r.folded_types)
            console.print(
                styled(
                    ("folded only:", "dim"),
                    f" {label}: {r.folded_only} group(s) opened by {kinds} "
                    "(no command to decide again; checked by folding)",
                )
            )
        d = r.divergence
        if d is None:
            continue
        console.print(
            styled(
                ("diverged:", "red"),
                f" {label} at seq {d.seq}" + (f" deciding {d.command}" if d.command else ""),
            )
        )
        if d.note:
            console.print(f"  {d.note}")
        console.print(f"  expected: {_event(d.expected)}")
        console.print(f"  got:      {_event(d.got)}")
    total = len(reports)
    bad = sum(not r.ok for r in reports)
    verdict = ("DIVERGED", "red") if bad else ("identical", "green")
    console.print(styled(verdict, f": {total - bad}/{total} runs from {source} replay identically"))


def _event(d: dict[str, Any] | None) -> str:
    return "(no event)" if d is None else json.dumps(d, ensure_ascii=False, sort_keys=False)


def export(
    workflow_ids: Annotated[list[str], typer.Argument(help="Workflow IDs to export.")],
    commands: Annotated[
        bool, typer.Option(help="Include the commands still in keel.commands.")
    ] = True,
    app: UnusedAppOption = None,
) -> None:
    """Write workflows' histories as JSON lines (the format replay-check reads)."""
    from orchestrator.client.history_io import read_topic_history, write_history
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import KeelError

    envelopes = read_topic_history(load_settings(), workflow_ids, commands=commands)
    found = {e.workflow_id for e in envelopes}
    missing = [w for w in workflow_ids if w not in found]
    if missing:
        raise KeelError(f"no history in keel.events for: {', '.join(missing)}")
    write_history(envelopes, sys.stdout)
