"""``keel workflow verify ID... | --all [--json]``: check recorded histories against the
invariants every history must keep (orchestrator/domain/history/invariants.py).

It reads ``<prefix>.events`` once, keeping a streaming checker per workflow rather than
its envelopes, and exits 1 when any invariant is broken, so a script or CI can gate on it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app_spec import UnusedAppOption
from orchestrator.cli.output import LazyConsole, new_table, styled
from orchestrator.runtime.exit_codes import ExitCode

if TYPE_CHECKING:
    from orchestrator.client.history_io import Verification
    from orchestrator.config.settings import Settings
    from orchestrator.domain.history.invariants import ProofCheck

console = LazyConsole(highlight=False, emoji=False)


def decision_proof_check(settings: Settings) -> ProofCheck | None:
    """The check that recomputes each human decision's proof under the deployment's key
    (orchestrator/trust/decision_proofs.py); None when this deployment has no task-token
    key here: then only a proof's form (64 lowercase hex) and its token hash are checked."""
    from orchestrator.domain.model.errors import ConfigError
    from orchestrator.trust.decision_proofs import load_proof_key, proof_matches

    try:
        key = load_proof_key(settings)
    except ConfigError:
        return None
    return lambda workflow_id, decided: proof_matches(key, workflow_id, decided)


def verify(
    workflow_ids: Annotated[
        list[str] | None, typer.Argument(help="Workflow IDs to check (or --all).")
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Check every workflow in the events topic.")
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: UnusedAppOption = None,
) -> None:
    """Check workflows' recorded histories; exit 1 when any invariant is broken."""
    if bool(workflow_ids) == all_:
        raise typer.BadParameter("give workflow IDs or --all (exactly one of them)")
    from orchestrator.client.history_io import verify_topic
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.history.invariants import Invariant, Violation

    settings = load_settings()
    proof_ok = decision_proof_check(settings)
    report = verify_topic(settings, workflow_ids, proof_ok=proof_ok)
    if workflow_ids:
        seen = set(report.checked)
        report.violations.extend(
            Violation(w, 0, Invariant.START, f"no events in {settings.topic('events')}")
            for w in dict.fromkeys(workflow_ids)
            if w not in seen
        )
    _print(report, json_, proofs_verified=proof_ok is not None)
    if report.violations:
        raise typer.Exit(ExitCode.FAILED)


def _print(report: Verification, json_: bool, *, proofs_verified: bool) -> None:
    if json_:
        doc = {
            "workflows": report.workflows,
            "events": report.events,
            "proofs_verified": proofs_verified,
            "violations": [
                {"workflow_id": v.workflow_id, "seq": v.seq, "rule": v.rule, "message": v.message}
                for v in report.violations
            ],
        }
        typer.echo(json.dumps(doc))
        return
    if report.violations:
        table = new_table("workflow", "seq", "rule", "violation")
        for v in report.violations:
            table.add_row(v.workflow_id, str(v.seq), str(v.rule), v.message)
        console.print(table)
    if not proofs_verified:
        console.print(
            styled(
                (
                    "human decisions' proofs checked for form only: no task-token key here "
                    "(KEEL_TASK_TOKEN_SECRET or KEEL_TASK_TOKEN_SECRET_FILE)",
                    "dim",
                )
            )
        )
    n = len(report.violations)
    colour = "red" if n else "green"
    console.print(
        styled(
            f"{report.workflows} workflows, {report.events} events, ",
            (f"{n} violation{'' if n == 1 else 's'}", colour),
        )
    )
