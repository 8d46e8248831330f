"""``keel schemas export``: the event log's Avro schemas, for readers in any language.

Writes to a folder every ``keel.Envelope`` version and every published version of the
application's payload schemas (Keel's ``avro/``, and what the folder already holds), plus
a new version of each payload schema whose model changed since its newest published one
(docs/event-log.md). Needs no server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.app_spec import AppOption, app_from
from orchestrator.cli.output import LazyConsole
from orchestrator.runtime.exit_codes import ExitCode

schemas_app = typer.Typer(help="Avro schemas of keel.events, for readers in other languages.")
console = LazyConsole(highlight=False, emoji=False, soft_wrap=True)


@schemas_app.command("export")
def export(
    out: Annotated[
        Path, typer.Option("--out", help="Folder to write the .avsc files to (created).")
    ] = Path("keel-schemas"),
    app: AppOption = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Write nothing; exit 1 when a model changed without a published version.",
        ),
    ] = False,
) -> None:
    """Write the envelope's and the application's payload schemas (new versions included).

    Export to the same folder again after a model changed: its files count as published,
    so the changed model gets its next version and nothing is rewritten."""
    from orchestrator.domain.model.errors import ConfigError
    from orchestrator.payload_schemas import declared_schemas, plan_export
    from orchestrator.payload_schemas.codec import (
        default_schema_dir,
        load_schema_files,
        schema_fingerprint,
    )

    root = default_schema_dir()
    published = load_schema_files(root)
    if out.is_dir() and out.resolve() != root.resolve():
        published += load_schema_files(out)  # what this folder published before
    declared = declared_schemas(app_from(app))
    plan = plan_export(declared, published, schema_fingerprint)
    if check:
        for path in plan.new:
            console.print(f"unpublished: {path}")
        if plan.new:
            console.print(f"{len(plan.new)} model(s) changed: keel schemas export --out {out}")
            raise typer.Exit(ExitCode.FAILED)
        console.print(f"{len(declared) - len(plan.untyped)} payload schemas published")
        return
    written = kept = 0
    for rel, text in sorted(plan.files.items()):
        target = out / rel
        if target.exists():
            if target.read_text(encoding="utf-8") != text:
                raise ConfigError(
                    f"{target} exists with other contents: a released schema is never "
                    "rewritten (export to an empty folder, or publish a new version)"
                )
            kept += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written += 1
    for path in plan.new:
        console.print(f"new version: {path}")
    for d in plan.untyped:
        console.print(f"stays JSON: {d.binding.fullname} ({d.model}): {d.reason}")
    console.print(f"{written} written, {kept} already there: {out}")
